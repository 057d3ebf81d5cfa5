package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"loupe/internal/export/delivery"
	"loupe/internal/export/kafka/flowpb"
	"loupe/internal/flow"
	kafkapeer "loupe/internal/testutil/kafka"
)

// decode decodes one consumed value in the given format.
func decode(f Format, v []byte) (flow.Record, error) {
	if f == FormatJSON {
		var r flow.Record
		err := json.Unmarshal(v, &r)
		return r, err
	}
	var m flowpb.FlowRecord
	if err := proto.Unmarshal(v, &m); err != nil {
		return flow.Record{}, err
	}
	return fromProto(&m)
}

// checkConsumed asserts that got holds each record of sent exactly once,
// field for field, keyed by its flow; that one flow's records share a
// partition and appear there in the order sent; and that the flows were
// spread over more than one partition (or the partition check would prove
// nothing).
func checkConsumed(t *testing.T, f Format, sent []flow.Record, got []*kgo.Record) {
	t.Helper()
	if len(got) != len(sent) {
		t.Errorf("consumed %d records, sent %d", len(got), len(sent))
	}
	byID := map[uint64]int{} // Packets is unique in testRecords
	for i := range sent {
		byID[sent[i].Packets] = i
	}
	seen := map[uint64]bool{}
	partOf := map[string]int32{}
	lastID := map[string]uint64{}
	parts := map[int32]bool{}
	for _, kr := range got {
		r, err := decode(f, kr.Value)
		if err != nil {
			t.Fatalf("partition %d offset %d: %v: %q", kr.Partition, kr.Offset, err, kr.Value)
		}
		i, ok := byID[r.Packets]
		if !ok {
			t.Fatalf("consumed a record that was never sent: %+v", r)
		}
		if seen[r.Packets] {
			t.Errorf("record %d consumed twice", r.Packets)
		}
		seen[r.Packets] = true
		if !reflect.DeepEqual(r, sent[i]) {
			t.Errorf("record %d:\n got %+v\nsent %+v", r.Packets, r, sent[i])
		}
		if want := AppendKey(nil, &sent[i].Key); !bytes.Equal(kr.Key, want) {
			t.Errorf("record %d: key %x, want %x", r.Packets, kr.Key, want)
		}
		k := string(kr.Key)
		if p, ok := partOf[k]; ok && p != kr.Partition {
			t.Errorf("flow %x: records in partitions %d and %d", kr.Key, p, kr.Partition)
		}
		partOf[k] = kr.Partition
		parts[kr.Partition] = true
		if r.Packets < lastID[k] {
			t.Errorf("flow %x: record %d after record %d in its partition", kr.Key, r.Packets, lastID[k])
		}
		lastID[k] = r.Packets
	}
	if len(seen) != len(sent) {
		t.Errorf("%d of %d records consumed", len(seen), len(sent))
	}
	if len(parts) < 2 {
		t.Errorf("all %d flows in %d partition(s): the test cannot tell keyed from sticky partitioning", len(partOf), len(parts))
	}
}

// TestProduceAndConsume sends IPv4, IPv6 and non-IP records, several per
// flow, to a real broker, through the Client directly and through the
// delivery queue, in both formats, and reads them back with a consumer.
func TestProduceAndConsume(t *testing.T) {
	b := kafkapeer.Start(t)
	const flows, perFlow, partitions = 37, 5, 4 // 37: no round-robin puts a flow in one partition
	sent := testRecords(flows, perFlow)

	for _, tc := range []struct {
		format Format
		queue  bool
	}{{FormatProtobuf, false}, {FormatProtobuf, true}, {FormatJSON, false}, {FormatJSON, true}} {
		name := fmt.Sprintf("%s/queue=%v", tc.format, tc.queue)
		t.Run(name, func(t *testing.T) {
			topic := fmt.Sprintf("flows-%s-%v", tc.format, tc.queue)
			b.CreateTopic(t, topic, partitions)
			c, err := New(fmt.Sprintf("kafka://%s/%s?format=%s", b.Addr(), topic, tc.format), Options{Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.queue {
				q := delivery.New(c.Target().String(), c, delivery.Options{BatchSize: 64, MaxLinger: 20 * time.Millisecond, Logger: testLogger(t)})
				for i := 0; i < len(sent); i += 30 {
					batch := append([]flow.Record(nil), sent[i:min(i+30, len(sent))]...)
					if err := q.Write(context.Background(), batch); err != nil {
						t.Fatal(err)
					}
					clear(batch) // the queue must have copied them
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				st := q.Stats()
				if st.Sent != uint64(len(sent)) || st.Dropped() != 0 || st.SendErrors != 0 || st.Connected != 1 {
					t.Errorf("queue stats %+v, want %d sent and nothing dropped", st, len(sent))
				}
			} else {
				// Two Sends of different sizes: the second reuses the first's state.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, part := range [][]flow.Record{sent[:120], sent[120:]} {
					batch := append([]flow.Record(nil), part...)
					failed, err := c.Send(ctx, batch)
					if err != nil || len(failed) != 0 {
						t.Fatalf("Send: %d failed: %v", len(failed), err)
					}
				}
				if !c.Connected() || c.Rejected() != 0 {
					t.Errorf("connected %v, rejected %d after delivering everything", c.Connected(), c.Rejected())
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			checkConsumed(t, tc.format, sent, consume(t, b.ClientOpts(), topic, len(sent)))
		})
	}
}

// TestSendFailsWhenNoBroker checks the failure contract: with nothing
// listening, Send returns every record, in order, when its context ends.
func TestSendFailsWhenNoBroker(t *testing.T) {
	c, err := New("kafka://127.0.0.1:1/flows", Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := testRecords(6, 2)
	batch := append([]flow.Record(nil), sent...)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	failed, err := c.Send(ctx, batch)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Send to no broker: error %v, want the deadline and the refused connection", err)
	}
	if len(failed) != len(sent) || &failed[0] != &batch[0] {
		t.Fatalf("%d records failed (aliasing batch: %v), want all %d", len(failed), len(failed) > 0 && &failed[0] == &batch[0], len(sent))
	}
	if !reflect.DeepEqual(failed, sent) {
		t.Errorf("failed records changed or reordered")
	}
	if c.Connected() {
		t.Errorf("connected after a Send that delivered nothing")
	}
	if n := c.Rejected(); n != 0 {
		t.Errorf("%d rejected", n)
	}
}
