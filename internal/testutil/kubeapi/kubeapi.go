// Package kubeapi runs a real Kubernetes control plane's storage and API
// for tests: etcd and kube-apiserver on free loopback ports, with their
// data in the test's temporary directory. There is no kubelet, scheduler or
// controller: what they would write (a pod's IP and phase, a ReplicaSet's
// pods) the test writes itself, through the status subresource.
//
// The binaries come from scripts/peers/kube.sh, which builds them from the
// Go module proxy into a cache outside the repository. Without them the
// test is skipped, or fails when CI_REQUIRE_PRIVILEGED=1, like the Kafka
// harness: CI builds every peer.
//
// Two users can call the API, both by bearer token: an administrator
// (group system:masters) for the test's own writes, and "loupe-agent", who
// may do nothing until the test grants it a role, so that the code under
// test runs with the permissions it documents.
package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"loupe/internal/testutil"
)

// Version is the kube-apiserver version the harness runs.
const Version = "1.34.4"

// BinEnv overrides the directory of the binaries.
const BinEnv = "LOUPE_KUBE_BIN"

// DefaultBin is where scripts/peers/kube.sh puts them.
const DefaultBin = "/var/cache/loupe/peers/kube-" + Version

// AgentUser is the user the agent's kubeconfig authenticates as.
const AgentUser = "loupe-agent"

// readyTimeout bounds every wait for a process to start or stop.
const readyTimeout = 60 * time.Second

// Cluster is a running etcd with one API server in front of it, and
// possibly spares (Spare) sharing its storage.
type Cluster struct {
	t        testing.TB
	bin, dir string
	etcdURL  string
	ca       []byte // PEM of the CA that signed the serving certificate
	admin    string // bearer tokens
	agent    string

	mu       sync.Mutex
	etcd     *process
	main     *process // the API server Client and Kubeconfig point at
	mainPort int
}

// Start starts etcd and an API server and returns once the server is
// ready. t.Cleanup kills both.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := requireBinaries(t)
	c := &Cluster{t: t, bin: bin, dir: t.TempDir(), admin: token(), agent: token()}
	if err := c.writeCredentials(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	c.startEtcd(t)
	c.mainPort = testutil.FreePorts(t, 1)[0]
	c.main = c.startAPIServer(t, "apiserver", c.mainPort)
	return c
}

// Client is a client of the main API server, as the administrator.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	return c.clientOf(t, c.mainPort)
}

func (c *Cluster) clientOf(t testing.TB, port int) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.restConfig(port, c.admin))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (c *Cluster) restConfig(port int, bearer string) *rest.Config {
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		BearerToken:     bearer,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca},
		QPS:             1000,
		Burst:           1000,
	}
}

// Addr is the main API server's address, on the host's loopback.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.mainPort)) }

// Kubeconfig writes a kubeconfig for AgentUser on the main API server and
// returns its path.
func (c *Cluster) Kubeconfig(t testing.TB) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.mainPort)),
		CertificateAuthorityData: c.ca,
	}
	cfg.AuthInfos[AgentUser] = &clientcmdapi.AuthInfo{Token: c.agent}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: AgentUser}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// StopAPIServer kills the main API server (etcd runs on): its clients'
// connections break at once.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	p := c.main
	c.main = nil
	c.mu.Unlock()
	if p != nil {
		p.kill(c.t)
	}
}

// RestartAPIServer starts the main API server again, on the same port, and
// waits until it is ready.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	c.StopAPIServer()
	p := c.startAPIServer(t, "apiserver", c.mainPort)
	c.mu.Lock()
	c.main = p
	c.mu.Unlock()
}

// Spare starts another API server on the same etcd, on a port of its own,
// and returns an administrator's client of it and a function that kills it:
// the cluster changes while the main server is down.
func (c *Cluster) Spare(t testing.TB) (kubernetes.Interface, func()) {
	t.Helper()
	port := testutil.FreePorts(t, 1)[0]
	p := c.startAPIServer(t, "spare-apiserver", port)
	t.Cleanup(func() { p.kill(t) })
	return c.clientOf(t, port), func() { p.kill(t) }
}

func (c *Cluster) stop() {
	c.StopAPIServer()
	c.mu.Lock()
	e := c.etcd
	c.etcd = nil
	c.mu.Unlock()
	if e != nil {
		e.kill(c.t)
	}
}

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) startEtcd(t testing.TB) {
	t.Helper()
	ports := testutil.FreePorts(t, 2)
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.etcdURL = client
	p := start(t, c.path("etcd.log"), filepath.Join(c.bin, "etcd"),
		"--name=default",
		"--data-dir="+c.path("etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		// Test data need not survive a power cut.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	c.mu.Lock()
	c.etcd = p
	c.mu.Unlock()
	p.waitReady(t, func(ctx context.Context) error { return get(ctx, nil, client+"/health", "") })
}

// startAPIServer starts kube-apiserver with the flags controller-runtime's
// envtest uses, plus a token file for the two users and no endpoint
// reconciler (there is no other control-plane member to agree with).
func (c *Cluster) startAPIServer(t testing.TB, name string, port int) *process {
	t.Helper()
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := start(t, c.path(name+"-"+strconv.Itoa(port)+".log"), filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers="+c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+c.path("certs"),
		"--tls-cert-file="+c.path("serving.crt"),
		"--tls-private-key-file="+c.path("serving.key"),
		// Room for a benchmark's thousands of services.
		"--service-cluster-ip-range=10.0.0.0/16",
		"--service-account-issuer="+url+"/",
		"--service-account-key-file="+c.path("sa.key"),
		"--service-account-signing-key-file="+c.path("sa.key"),
		"--token-auth-file="+c.path("tokens.csv"),
		"--authorization-mode=RBAC",
		// No controller creates the default service account.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
	)
	p.waitReady(t, func(ctx context.Context) error { return get(ctx, c.ca, url+"/readyz", c.admin) })
	return p
}

// writeCredentials writes the CA-signed serving certificate, the service
// account signing key and the token file.
func (c *Cluster) writeCredentials() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "loupe-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	c.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"serving.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tokens.csv":  fmt.Appendf(nil, "%s,admin,admin,\"system:masters\"\n%s,%s,%s\n", c.admin, c.agent, AgentUser, AgentUser),
	}
	if files["serving.key"], err = keyPEM(key); err != nil {
		return err
	}
	if files["sa.key"], err = keyPEM(saKey); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// requireBinaries finds etcd and kube-apiserver, or skips (fails under
// CI) the test.
func requireBinaries(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(BinEnv)
	if dir == "" {
		dir = DefaultBin
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			msg := fmt.Sprintf("kube-apiserver %s and etcd not found in %s (run scripts/peers/kube.sh, or set %s)", Version, dir, BinEnv)
			if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
				t.Fatalf("%s, and %s=1 forbids skipping", msg, testutil.RequirePrivilegedEnv)
			}
			t.Skip(msg)
		}
	}
	return dir
}

// process is a peer process with its log file.
type process struct {
	cmd  *exec.Cmd
	log  string
	exit chan struct{} // closed when cmd has exited
}

func start(t testing.TB, logPath, bin string, args ...string) *process {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies, its peers die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", filepath.Base(bin), err)
	}
	p := &process{cmd: cmd, log: logPath, exit: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.exit)
	}()
	return p
}

// waitReady polls ready until it succeeds, the process exits, or
// readyTimeout passes; the last two fail the test with the log's end.
func (p *process) waitReady(t testing.TB, ready func(context.Context) error) {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var err error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err = ready(rctx)
		rcancel()
		if err == nil {
			t.Logf("%s pid %d ready in %s", filepath.Base(p.cmd.Path), p.cmd.Process.Pid, time.Since(began).Round(time.Millisecond))
			return
		}
		select {
		case <-p.exit:
			t.Fatalf("%s exited while starting: %v\n%s", filepath.Base(p.cmd.Path), err, p.tail())
		case <-ctx.Done():
			p.kill(t)
			t.Fatalf("%s not ready after %s: %v\n%s", filepath.Base(p.cmd.Path), readyTimeout, err, p.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exit:
	case <-time.After(readyTimeout):
		t.Errorf("%s pid %d did not exit after SIGKILL", filepath.Base(p.cmd.Path), p.cmd.Process.Pid)
	}
	if t.Failed() {
		t.Logf("%s log (end):\n%s", filepath.Base(p.cmd.Path), p.tail())
	}
}

func (p *process) tail() string {
	data, _ := os.ReadFile(p.log)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// get fetches url and fails unless it answers 200.
func get(ctx context.Context, caPEM []byte, url, bearer string) error {
	rc := &rest.Config{Host: url, BearerToken: bearer, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
	client, err := rest.HTTPClientFor(rc)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New(resp.Status)
	}
	return nil
}
