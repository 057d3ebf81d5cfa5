package kafka

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerSurvivesRestart checks the harness itself: records produced
// before a SIGKILL are read back after Restart, from the same data
// directory and port, and the restarted broker takes new records.
func TestBrokerSurvivesRestart(t *testing.T) {
	b := Start(t)
	const topic = "harness"
	b.CreateTopic(t, topic, 2)

	produce := func(from, to int) {
		t.Helper()
		cl, err := kgo.NewClient(append(b.ClientOpts(), kgo.DefaultProduceTopic(topic))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Key: []byte{byte(i)}, Value: fmt.Appendf(nil, "r%d", i)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %d..%d: %v", from, to, err)
		}
	}
	produce(0, 10)
	b.Kill()
	b.Restart(t)
	produce(10, 20)

	cl, err := kgo.NewClient(append(b.ClientOpts(), kgo.ConsumeTopics(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]int{}
	for n := 0; n < 20 && ctx.Err() == nil; {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++; n++ })
	}
	for i := range 20 {
		if c := got[fmt.Sprintf("r%d", i)]; c != 1 {
			t.Errorf("record r%d consumed %d times, want 1", i, c)
		}
	}
	if len(got) != 20 {
		t.Errorf("consumed %d distinct records, want 20: %v", len(got), got)
	}
}

// TestClusterID checks the ids handed to StorageTool: 16 bytes in base64url,
// never starting with a character its option parser would misread.
func TestClusterID(t *testing.T) {
	seen := map[string]bool{}
	for range 5000 {
		id := clusterID()
		raw, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil || len(raw) != 16 || len(id) != 22 {
			t.Fatalf("id %q: %d bytes, %v", id, len(raw), err)
		}
		if id[0] == '-' || id[0] == '_' {
			t.Fatalf("id %q starts with %q", id, id[0])
		}
		if seen[id] {
			t.Fatalf("id %q drawn twice", id)
		}
		seen[id] = true
	}
}
