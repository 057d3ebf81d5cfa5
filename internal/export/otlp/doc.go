// Package otlp exports flow records to an OpenTelemetry collector over
// OTLP/gRPC (`--export otlp://HOST:PORT`): each record as one log record
// (event loupe.flow, semantic-convention network attributes plus loupe.*
// ones), and cumulative traffic sums by interface, direction and transport
// as metrics.
//
// It speaks OTLP with the generated protobuf types and a plain gRPC
// channel, not the OpenTelemetry SDK: the SDK is built to instrument an
// application (it owns batching, queueing and retries, and builds one
// record at a time), while Loupe already has batches of finished records,
// bounds its memory itself and retries through internal/export/delivery.
// Client implements delivery.Client; New needs only the target and
// Options, and delivery.New turns it into a sink.
//
// See docs/exporters/otlp.md for what is sent and why.
package otlp
