package otlp

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fakeLogs is a scripted OTLP logs server, for what the collector's
// receiver cannot be made to do: answer with a partial success or a
// ResourceExhausted status, and report the compression each request used.
type fakeLogs struct {
	collogspb.UnimplementedLogsServiceServer
	resp *collogspb.ExportLogsServiceResponse
	err  error

	mu          sync.Mutex
	records     int
	md          []metadata.MD
	compression []string
}

func (f *fakeLogs) Export(ctx context.Context, req *collogspb.ExportLogsServiceRequest) (*collogspb.ExportLogsServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.md = append(f.md, md)
	for _, rl := range req.GetResourceLogs() {
		for _, sl := range rl.GetScopeLogs() {
			f.records += len(sl.GetLogRecords())
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	if f.resp != nil {
		return f.resp, nil
	}
	return &collogspb.ExportLogsServiceResponse{}, nil
}

// TagRPC, HandleRPC, TagConn and HandleConn make fakeLogs a stats.Handler
// that records the compression of every incoming request.
func (f *fakeLogs) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (f *fakeLogs) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok {
		f.mu.Lock()
		f.compression = append(f.compression, h.Compression)
		f.mu.Unlock()
	}
}
func (f *fakeLogs) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (f *fakeLogs) HandleConn(context.Context, stats.ConnStats)                       {}

func startFake(t *testing.T, f *fakeLogs) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StatsHandler(f))
	collogspb.RegisterLogsServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "otlp://" + l.Addr().String()
}

func TestPartialSuccessCountsRejected(t *testing.T) {
	f := &fakeLogs{resp: &collogspb.ExportLogsServiceResponse{PartialSuccess: &collogspb.ExportLogsPartialSuccess{
		RejectedLogRecords: 2, ErrorMessage: "2 records older than the retention",
	}}}
	c := newTestClient(t, startFake(t, f), Options{DisableMetrics: true, MaxRequestRecords: 5})
	failed, err := c.Send(context.Background(), manyRecords(7, 1))
	if err != nil || failed != nil {
		t.Fatalf("Send: failed %d, err %v", len(failed), err)
	}
	// Two requests (5 + 2 records), each answering "2 rejected".
	if n := c.Rejected(); n != 4 {
		t.Fatalf("Rejected() = %d, want 4", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records != 7 {
		t.Fatalf("server received %d records, want 7", f.records)
	}
}

func TestResourceExhausted(t *testing.T) {
	withRetry, err := status.New(codes.ResourceExhausted, "slow down").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		err       error
		wantRetry bool
	}{
		{"with RetryInfo: retryable", withRetry.Err(), true},
		{"without RetryInfo: refused", status.Error(codes.ResourceExhausted, "message larger than max"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, startFake(t, &fakeLogs{err: tc.err}), Options{DisableMetrics: true})
			batch := manyRecords(3, 1)
			failed, err := c.Send(context.Background(), batch)
			rejected := c.Rejected()
			if tc.wantRetry && (len(failed) != 3 || rejected != 0 || status.Code(err) != codes.ResourceExhausted) {
				t.Fatalf("failed %d, rejected %d, err %v; want 3 failed", len(failed), rejected, err)
			}
			if !tc.wantRetry && (failed != nil || err != nil || rejected != 3) {
				t.Fatalf("failed %d, rejected %d, err %v; want 3 rejected", len(failed), rejected, err)
			}
		})
	}
}

func TestCompressionAndHeaders(t *testing.T) {
	for _, comp := range []string{"", "none", "gzip"} {
		t.Run("compression="+comp, func(t *testing.T) {
			f := &fakeLogs{}
			c := newTestClient(t, startFake(t, f), Options{
				DisableMetrics: true, Compression: comp,
				Headers: map[string]string{"authorization": "Bearer s3cret", "X-Tenant": "team-a"},
			})
			if failed, err := c.Send(context.Background(), manyRecords(50, 2)); err != nil || failed != nil {
				t.Fatalf("Send: failed %d, err %v", len(failed), err)
			}
			want := comp
			if comp == "none" {
				want = ""
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.compression) != 1 || f.compression[0] != want {
				t.Fatalf("server saw compression %q, want [%q]", f.compression, want)
			}
			if f.records != 50 {
				t.Fatalf("server decoded %d records, want 50", f.records)
			}
			md := f.md[0]
			if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer s3cret" {
				t.Fatalf("authorization metadata %q", got)
			}
			if got := md.Get("x-tenant"); len(got) != 1 || got[0] != "team-a" {
				t.Fatalf("x-tenant metadata %q", got)
			}
		})
	}
}
