// Package delivery gives every network exporter the same delivery
// semantics: a bounded queue, batching, retries with back-off, reconnection,
// counted drops and a flush on shutdown within a deadline.
//
// An exporter (IPFIX, Kafka, OTLP) implements only Client: how to encode and
// send one batch. New wraps a Client into an export.Sink whose Write never
// blocks: it copies records into the queue, or counts them as dropped when
// the queue is full. One goroutine per exporter drains the queue, so a slow
// collector slows neither the datapath nor another exporter.
package delivery

import (
	"context"

	"loupe/internal/flow"
)

// Client sends batches of flow records to one collector.
//
// Send and Close are called from one goroutine only; a Client needs no
// locking of its own.
type Client interface {
	// Send delivers batch, connecting (or reconnecting) first if needed.
	//
	// On success it returns (nil, nil). Otherwise it returns the records it
	// did not deliver and why. failed must alias batch's storage: a
	// sequential transport returns a tail (batch[k:]); one that delivers
	// records independently (Kafka partitions) moves the failed ones to
	// the front and returns batch[:n], keeping their order. The queue
	// retries failed with back-off; Send must therefore never report a
	// record as failed that it delivered, unless delivery is ambiguous
	// (a TCP write cut off mid-message), in which case a duplicate is
	// preferred to a loss.
	//
	// A record the collector can never accept (too large for any message,
	// say) is not failed: Send drops it and reports it with Rejected.
	//
	// Send must return when ctx is done; the records it did not deliver
	// by then are failed.
	Send(ctx context.Context, batch []flow.Record) (failed []flow.Record, err error)

	// Close releases the connection. It is called once, after the last
	// Send.
	Close() error
}

// Rejecter is implemented by clients that can refuse records outright.
// Rejected returns, and resets, the number of records refused since the
// last call; the queue counts them as dropped with reason "rejected".
type Rejecter interface {
	Rejected() uint64
}

// Connector is implemented by clients that know whether they hold a live
// connection; the queue exports it as loupe_export_connected.
type Connector interface {
	Connected() bool
}

// Abandoner is implemented by clients that keep records after reporting
// them delivered, to resend them if the connection breaks (IPFIX over TCP
// keeps what the collector has not acknowledged). Abandoned is read once,
// after Close: the records the client had to give up then. The queue moves
// them from sent to dropped, reason "shutdown".
type Abandoner interface {
	Abandoned() uint64
}

// Unreacher is implemented by clients that learn when the collector's host
// refuses what they send (an ICMP port unreachable over UDP, a refused TCP
// connection). Unreachable returns how many times, since the start; the
// queue exports it as loupe_export_unreachable_total. The refused records
// are failed, and retried, like any others.
type Unreacher interface {
	Unreachable() uint64
}
