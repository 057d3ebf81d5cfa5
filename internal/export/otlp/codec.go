package otlp

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// encodedRequest is a request the client has already encoded in protobuf
// wire format (logEncoder.build).
type encodedRequest []byte

// codec is gRPC's protobuf codec, except that it sends an encodedRequest
// as it is. Its name is "proto", so the content type on the wire stays
// application/grpc+proto and any OTLP server reads the request.
type codec struct{ proto encoding.CodecV2 }

func newCodec() (codec, error) {
	c := encoding.GetCodecV2(grpcproto.Name)
	if c == nil {
		return codec{}, fmt.Errorf("otlp: gRPC has no %q codec registered", grpcproto.Name)
	}
	return codec{proto: c}, nil
}

// Marshal copies an encodedRequest into a buffer of gRPC's pool, which
// gRPC frees once the message is written: the client's own buffer is
// reused for the next request as soon as Send returns, which may be
// before the transport has written the last bytes (when the server
// answers early).
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(encodedRequest)
	if !ok {
		return c.proto.Marshal(v)
	}
	if mem.IsBelowBufferPoolingThreshold(len(r)) {
		return mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), r...))}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(len(r))
	copy(*buf, r)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return grpcproto.Name }
