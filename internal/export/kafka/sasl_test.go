package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"loupe/internal/flow"
	kafkapeer "loupe/internal/testutil/kafka"
)

// TestSASLPlainBroker produces to a broker that requires SASL/PLAIN: the
// right password delivers every record, a wrong one delivers none and
// says why.
func TestSASLPlainBroker(t *testing.T) {
	b := kafkapeer.StartWith(t, kafkapeer.Options{SASLPlain: map[string]string{"loupe": "flow-secret"}})
	const topic = "flows-sasl"
	b.CreateTopic(t, topic, 3)
	target := fmt.Sprintf("kafka://%s/%s", b.Addr(), topic)
	sent := testRecords(11, 3)

	bad, err := New(target, Options{SASL: SASLOptions{Mechanism: SASLPlain, Username: "loupe", Password: "wrong"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed, err := bad.Send(ctx, append([]flow.Record(nil), sent...))
	bad.Close()
	if len(failed) != len(sent) || !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("wrong password: %d of %d failed, err %v (want SASL_AUTHENTICATION_FAILED)", len(failed), len(sent), err)
	}

	good, err := New(target, Options{SASL: SASLOptions{Mechanism: SASLPlain, Username: "loupe", Password: "flow-secret"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if failed, err := good.Send(ctx, append([]flow.Record(nil), sent...)); err != nil || len(failed) != 0 {
		t.Fatalf("right password: %d failed: %v", len(failed), err)
	}
	checkConsumed(t, FormatProtobuf, sent, consume(t, b.ClientOpts(), topic, len(sent)))
}
