// Package kafka runs a real Apache Kafka broker for tests: one KRaft node
// (broker and controller in one JVM) on free loopback ports, with its data
// in the test's temporary directory.
//
// The broker's jars come from scripts/peers/kafka.sh, which fetches them
// from Maven Central into a cache outside the repository. Without them (or
// without java) the test is skipped, or fails when CI_REQUIRE_PRIVILEGED=1,
// like testutil.RequirePeer: CI fetches every peer.
package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"loupe/internal/testutil"
)

// Version is the Kafka version the harness runs.
const Version = "4.3.1"

// LibsEnv overrides the directory of the broker's jars.
const LibsEnv = "LOUPE_KAFKA_LIBS"

// DefaultLibs is where scripts/peers/kafka.sh puts the jars.
const DefaultLibs = "/var/cache/loupe/peers/kafka-" + Version

// readyTimeout bounds every wait for the broker: start, restart, stop.
const readyTimeout = 60 * time.Second

// Options configure a broker. The zero value is a PLAINTEXT broker.
type Options struct {
	// SASLPlain, when not empty, makes the client listener SASL_PLAINTEXT
	// with the PLAIN mechanism, accepting these users and passwords. The
	// first user in sorted order is not special: the harness's own admin
	// connections use a separate account.
	SASLPlain map[string]string
}

// Broker is a running single-node Kafka.
type Broker struct {
	t       testing.TB
	libs    string
	dir     string
	port    int
	ctlPort int
	opts    Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// adminUser is the harness's own SASL account.
const adminUser, adminPassword = "loupe-test-admin", "admin-secret"

// Start formats a fresh data directory and starts a PLAINTEXT broker; it
// returns once the broker answers metadata requests. t.Cleanup kills it.
func Start(t testing.TB) *Broker {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Broker {
	t.Helper()
	libs := requireLibs(t)
	b := &Broker{t: t, libs: libs, dir: t.TempDir(), opts: opts}
	ports := testutil.FreePorts(t, 2)
	b.port, b.ctlPort = ports[0], ports[1]
	if err := b.writeConfig(); err != nil {
		t.Fatal(err)
	}
	if out, err := b.java("kafka.tools.StorageTool", "format", "--ignore-formatted",
		"-t", clusterID(), "-c", b.path("server.properties")).CombinedOutput(); err != nil {
		t.Fatalf("kafka storage format: %v: %s", err, out)
	}
	t.Cleanup(b.stop)
	b.launch(t)
	return b
}

// Addr is the client listener, host:port on loopback.
func (b *Broker) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// ClientOpts are the franz-go options that reach the broker as the
// harness's admin (seed broker, and SASL when enabled).
func (b *Broker) ClientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(b.Addr())}
	if len(b.opts.SASLPlain) > 0 {
		opts = append(opts, kgo.SASL(plain.Auth{User: adminUser, Pass: adminPassword}.AsMechanism()))
	}
	return opts
}

// CreateTopic creates a topic with replication factor 1 and waits until
// every partition takes writes. Pre-creating avoids relying on
// auto-creation (disabled here), whose first produce waits on franz-go's
// metadata refresh.
func (b *Broker) CreateTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	cl, err := kgo.NewClient(b.ClientOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	// Metadata can name a leader before the leader's replica manager has
	// the partition: a produce then fails with NOT_LEADER_OR_FOLLOWER and
	// franz-go waits out MetadataMinAge (5 s) before it looks again. A
	// ListOffsets answered for every partition means they are writable.
	for ctx.Err() == nil {
		if writable(ctx, adm, name, partitions) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("topic %s: partitions not writable after %s", name, readyTimeout)
}

func writable(ctx context.Context, adm *kadm.Client, topic string, partitions int32) bool {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false
	}
	n := int32(0)
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		n++
		ok = ok && o.Err == nil
	})
	return ok && n == partitions
}

// Kill sends SIGKILL to the broker and waits for it to exit: a crash, with
// nothing flushed or handed over.
func (b *Broker) Kill() {
	b.mu.Lock()
	cmd, exit := b.cmd, b.exit
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exit:
	case <-time.After(readyTimeout):
		b.t.Errorf("kafka broker pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// Restart starts the broker again on the same data directory and ports
// (after Kill, or kills it first) and waits until it is ready.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	b.Kill()
	b.launch(t)
}

// LogTail returns the end of the broker's log, for failure messages.
func (b *Broker) LogTail() string {
	data, _ := os.ReadFile(b.path("broker.log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

func (b *Broker) stop() {
	b.Kill()
	if b.t.Failed() {
		b.t.Logf("kafka broker log (end):\n%s", b.LogTail())
	}
}

func (b *Broker) path(name string) string { return filepath.Join(b.dir, name) }

func (b *Broker) java(args ...string) *exec.Cmd {
	base := []string{
		"-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + b.path("log4j2.properties"),
		"-cp", filepath.Join(b.libs, "*"),
	}
	cmd := exec.Command(javaPath(b.t), append(base, args...)...)
	cmd.Dir = b.dir
	return cmd
}

// launch starts the JVM and waits until the broker serves metadata.
func (b *Broker) launch(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(b.path("stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := b.java("kafka.Kafka", b.path("server.properties"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start kafka: %v", err)
	}
	exit := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exit)
	}()
	b.mu.Lock()
	b.cmd, b.exit = cmd, exit
	b.mu.Unlock()
	began := time.Now()
	if err := b.waitReady(exit); err != nil {
		out, _ := os.ReadFile(b.path("stdout.log"))
		t.Fatalf("kafka broker: %v\nstdout:\n%s\nlog:\n%s", err, tail(out), b.LogTail())
	}
	t.Logf("kafka %s broker pid %d ready on %s in %s", Version, cmd.Process.Pid, b.Addr(), time.Since(began).Round(time.Millisecond))
}

// waitReady polls the broker with a metadata request until it lists itself.
func (b *Broker) waitReady(exit <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		select {
		case <-exit:
			return errors.New("exited while starting")
		default:
		}
		if err := b.ping(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s", readyTimeout)
		case <-exit:
			return errors.New("exited while starting")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *Broker) ping(ctx context.Context) error {
	cl, err := kgo.NewClient(append(b.ClientOpts(), kgo.RetryTimeout(time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(pctx)
	if err != nil {
		return err
	}
	if len(md.Brokers) == 0 || md.Controller < 0 {
		return errors.New("no broker or controller yet")
	}
	return nil
}

func (b *Broker) writeConfig() error {
	listener, protocol := "PLAINTEXT", "PLAINTEXT"
	var sasl strings.Builder
	if len(b.opts.SASLPlain) > 0 {
		listener, protocol = "SASL_PLAINTEXT", "SASL_PLAINTEXT"
		fmt.Fprintf(&sasl, "sasl.enabled.mechanisms=PLAIN\nsasl.mechanism.inter.broker.protocol=PLAIN\n")
		fmt.Fprintf(&sasl, "listener.name.sasl_plaintext.plain.sasl.jaas.config="+
			"org.apache.kafka.common.security.plain.PlainLoginModule required "+
			"username=%q password=%q user_%s=%q", adminUser, adminPassword, adminUser, adminPassword)
		for u, p := range b.opts.SASLPlain {
			fmt.Fprintf(&sasl, " user_%s=%q", u, p)
		}
		sasl.WriteString(";\n")
	}
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=%[3]s://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=%[3]s://127.0.0.1:%[1]d
controller.listener.names=CONTROLLER
inter.broker.listener.name=%[3]s
listener.security.protocol.map=%[3]s:%[4]s,CONTROLLER:PLAINTEXT
log.dirs=%[5]s
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=2000
%[6]s`, b.port, b.ctlPort, listener, protocol, b.path("data"), sasl.String())
	if err := os.WriteFile(b.path("server.properties"), []byte(props), 0o600); err != nil {
		return err
	}
	log4j := `status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ` + b.path("broker.log") + `
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
`
	return os.WriteFile(b.path("log4j2.properties"), []byte(log4j), 0o600)
}

// requireLibs finds the broker jars, or skips (fails under CI) the test.
func requireLibs(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(LibsEnv)
	if dir == "" {
		dir = DefaultLibs
	}
	if _, err := os.Stat(filepath.Join(dir, "kafka_2.13-"+Version+".jar")); err != nil {
		msg := fmt.Sprintf("kafka %s jars not found in %s (run scripts/peers/kafka.sh, or set %s)", Version, dir, LibsEnv)
		if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
			t.Fatalf("%s, and %s=1 forbids skipping", msg, testutil.RequirePrivilegedEnv)
		}
		t.Skip(msg)
	}
	javaPath(t)
	return dir
}

func javaPath(t testing.TB) string { return testutil.RequirePeer(t, "java") }

// clusterID is a random Kafka cluster id: 16 random bytes, base64url
// without padding, as `StorageTool random-uuid` prints (without starting a
// second JVM for it).
//
// An id starting with '-' would read as an option to StorageTool, so it
// starts with a letter or a digit.
func clusterID() string {
	id := make([]byte, 16)
	for {
		_, _ = rand.Read(id)
		if s := base64.RawURLEncoding.EncodeToString(id); s[0] != '-' && s[0] != '_' {
			return s
		}
	}
}

func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
