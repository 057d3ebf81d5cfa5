// Package kafka exports flow records to Apache Kafka, one Kafka record per
// flow record, keyed by the flow so that a flow's records stay in one
// partition and in order. Values are loupe.flow.v1.FlowRecord protobuf
// messages (proto/loupe/flow/v1/flow.proto) or the agent's JSON objects.
//
// The package implements only delivery.Client: delivery.New wraps it into
// the agent's sink, with the queue, retries and drop counting every network
// exporter shares. The Kafka client is franz-go.
package kafka

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --proto_path=../../../proto --go_out=. --go_opt=module=loupe/internal/export/kafka loupe/flow/v1/flow.proto"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"loupe/internal/flow"
)

// Client produces flow records to one Kafka topic. It implements
// delivery.Client, delivery.Rejecter and delivery.Connector. Send and Close
// are called from one goroutine.
type Client struct {
	target Target
	kc     *kgo.Client
	encode func([]byte, *flow.Record) []byte

	// st is the state of the last Send, reused by the next one unless
	// that Send returned before every record was settled (its context
	// ended): franz-go may still read those records and call their
	// promises, so the next Send starts from a fresh state.
	st *sendState

	connected atomic.Bool
	rejected  atomic.Uint64

	// connErr is the error of the last failed attempt to connect to a
	// broker (refused, TLS, SASL), nil once a connection succeeds. A Send
	// that ends with its context and no record error reports it: "context
	// deadline exceeded" alone would hide a wrong password.
	connErrMu sync.Mutex
	connErr   error
}

// connHook records connection failures for the Client (kgo.HookBrokerConnect).
type connHook struct{ c *Client }

func (h connHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	c := h.c
	c.connErrMu.Lock()
	c.connErr = err
	c.connErrMu.Unlock()
	if err != nil {
		c.connected.Store(false)
	}
}

func (c *Client) lastConnErr() error {
	c.connErrMu.Lock()
	defer c.connErrMu.Unlock()
	return c.connErr
}

// New parses target (see ParseTarget) and creates a client. It does not
// connect: the first Send does, so that the agent starts while Kafka is
// unreachable and delivers once it is back.
func New(target string, opts Options) (*Client, error) {
	t, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	return NewTarget(t, opts)
}

// NewTarget is New with a parsed target.
func NewTarget(t Target, opts Options) (*Client, error) {
	opts.setDefaults()
	log := opts.Logger.With("component", "kafka", "exporter", t.String())
	kopts, err := kgoOpts(t, &opts, log)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", t, err)
	}
	c := &Client{target: t, encode: AppendProto}
	c.kc, err = kgo.NewClient(append(kopts, kgo.WithHooks(connHook{c}))...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", t, err)
	}
	if t.Format == FormatJSON {
		c.encode = flow.AppendJSON
	}
	return c, nil
}

// Target returns the parsed target; its String names the exporter.
func (c *Client) Target() Target { return c.target }

// Record states in sendState.status.
const (
	statePending uint32 = iota
	stateDelivered
	stateFailed
	stateRejected
)

// sendState holds what one Send hands to franz-go: the encoded keys and
// values (one arena for the whole batch), the kgo.Records pointing into it,
// and one promise per slot, made once and reused, so that a Send in steady
// state allocates nothing per record.
type sendState struct {
	arena    []byte
	ends     []uint32 // per record: end of its key, end of its value in arena
	recs     []kgo.Record
	status   []atomic.Uint32
	promises []func(*kgo.Record, error)

	pending atomic.Int64
	done    chan struct{} // closed when pending reaches zero

	mu  sync.Mutex
	err error // the first failure
}

// prepare sizes the state for n records and resets it.
func (s *sendState) prepare(n int) {
	if n > len(s.recs) {
		s.recs = make([]kgo.Record, n)
		s.ends = make([]uint32, 2*n)
		s.status = make([]atomic.Uint32, n)
		for i := len(s.promises); i < n; i++ {
			s.promises = append(s.promises, func(_ *kgo.Record, err error) { s.settle(i, err) })
		}
	}
	for i := range n {
		s.status[i].Store(statePending)
	}
	s.arena = s.arena[:0]
	s.err = nil
	s.pending.Store(int64(n))
	s.done = make(chan struct{})
}

// settle is the promise of record i; franz-go calls it exactly once.
func (s *sendState) settle(i int, err error) {
	st := stateDelivered
	if err != nil {
		st = stateFailed
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) {
			st = stateRejected // no retry can make the broker take it
		}
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	s.status[i].Store(st)
	if s.pending.Add(-1) == 0 {
		close(s.done)
	}
}

func (s *sendState) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Send implements delivery.Client: it produces every record of batch and
// waits until each is acknowledged or failed, or ctx ends. The records not
// delivered are moved to the front of batch, in order, and returned.
// Records the broker can never accept (too large, invalid) are dropped and
// counted for Rejected. Records still in flight when ctx ends are returned
// as failed although franz-go may yet deliver them: the queue's retry may
// then duplicate them, which the delivery contract prefers to a loss.
func (c *Client) Send(ctx context.Context, batch []flow.Record) ([]flow.Record, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	s := c.st
	if s == nil {
		s = &sendState{}
		c.st = s
	}
	s.prepare(len(batch))
	for i := range batch {
		s.arena = AppendKey(s.arena, &batch[i].Key)
		s.ends[2*i] = uint32(len(s.arena))
		s.arena = c.encode(s.arena, &batch[i])
		s.ends[2*i+1] = uint32(len(s.arena))
	}
	// One timestamp for the batch: franz-go would read the clock for each
	// record, and the records of one batch are produced together anyway.
	now := time.Now()
	start := uint32(0)
	for i := range batch {
		k, v := s.ends[2*i], s.ends[2*i+1]
		s.recs[i] = kgo.Record{
			Topic:     c.target.Topic,
			Key:       s.arena[start:k:k],
			Value:     s.arena[k:v:v],
			Timestamp: now,
		}
		start = v
	}
	for i := range batch {
		c.kc.Produce(ctx, &s.recs[i], s.promises[i])
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		c.st = nil // franz-go may still hold these records: abandon the state
	}

	failed, rejected := 0, uint64(0)
	for i := range batch {
		switch s.status[i].Load() {
		case stateDelivered:
			continue
		case stateRejected:
			rejected++
			continue
		}
		batch[failed] = batch[i]
		failed++
	}
	if rejected > 0 {
		c.rejected.Add(rejected)
	}
	c.connected.Store(failed < len(batch) || rejected > 0)
	if failed == 0 && rejected == 0 {
		return nil, nil
	}
	err := s.firstErr()
	if err == nil {
		err = context.Cause(ctx)
	}
	// Records that ran out of time (ours, or franz-go failing them with
	// our context's error) say nothing of why: add the broker's refusal.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if cerr := c.lastConnErr(); cerr != nil {
			err = fmt.Errorf("%w (last broker connection: %w)", err, cerr)
		}
	}
	err = fmt.Errorf("kafka %s: %d of %d records not delivered, %d rejected: %w",
		c.target, failed, len(batch), rejected, err)
	if failed == 0 {
		return nil, err
	}
	return batch[:failed], err
}

// Rejected implements delivery.Rejecter.
func (c *Client) Rejected() uint64 { return c.rejected.Swap(0) }

// Connected implements delivery.Connector. It reports the outcome of the
// last Send: true once a record was acknowledged, false after a Send
// delivered nothing, after a failed attempt to connect to a broker, and
// before the first Send.
func (c *Client) Connected() bool { return c.connected.Load() }

// Close implements delivery.Client. Records still buffered (only those of a
// Send abandoned when its context ended) are failed, not waited for.
func (c *Client) Close() error {
	c.kc.Close()
	return nil
}
