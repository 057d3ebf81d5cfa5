package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
)

// counts is what a receiver prints when stopped.
type counts struct {
	Messages uint64 `json:"messages"`
	Records  uint64 `json:"records"`
	Bytes    uint64 `json:"bytes"`
	Errors   uint64 `json:"errors"`
}

func waitForSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
}

func printCounts(c *counts) error {
	return json.NewEncoder(os.Stdout).Encode(c)
}

// recvIPFIX counts IPFIX data records. It learns each template's record
// length (Loupe's templates have fixed-length fields only) and divides each
// data set by it, so the count is exact without decoding every field.
func recvIPFIX(args []string) error {
	fs := flag.NewFlagSet("recv-ipfix", flag.ExitOnError)
	proto := fs.String("proto", "udp", "udp or tcp")
	addr := fs.String("addr", "127.0.0.1:4739", "listen address")
	fs.Parse(args)
	var c counts
	var records, messages, bytes, errs atomic.Uint64
	handle := func(tmpl map[uint16]int, msg []byte) {
		messages.Add(1)
		bytes.Add(uint64(len(msg)))
		n, err := countIPFIX(tmpl, msg)
		records.Add(uint64(n))
		if err != nil {
			errs.Add(1)
		}
	}
	switch *proto {
	case "udp":
		pc, err := net.ListenPacket("udp", *addr)
		if err != nil {
			return err
		}
		pc.(*net.UDPConn).SetReadBuffer(32 << 20)
		go func() {
			tmpl := map[uint16]int{}
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				handle(tmpl, buf[:n])
			}
		}()
		defer pc.Close()
	case "tcp":
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer conn.Close()
					r := bufio.NewReaderSize(conn, 1<<20)
					tmpl := map[uint16]int{}
					msg := make([]byte, 65536)
					for {
						if _, err := io.ReadFull(r, msg[:4]); err != nil {
							return
						}
						l := int(binary.BigEndian.Uint16(msg[2:4]))
						if l < 16 {
							errs.Add(1)
							return
						}
						if _, err := io.ReadFull(r, msg[4:l]); err != nil {
							return
						}
						handle(tmpl, msg[:l])
					}
				}()
			}
		}()
	default:
		return fmt.Errorf("recv-ipfix: -proto %q: want udp or tcp", *proto)
	}
	fmt.Fprintln(os.Stderr, "listening", *proto, *addr)
	waitForSignal()
	c.Messages, c.Records, c.Bytes, c.Errors = messages.Load(), records.Load(), bytes.Load(), errs.Load()
	return printCounts(&c)
}

// countIPFIX returns the number of data records in one IPFIX message,
// updating tmpl (template ID -> record length) from its template sets.
func countIPFIX(tmpl map[uint16]int, msg []byte) (int, error) {
	if len(msg) < 16 || binary.BigEndian.Uint16(msg) != 10 {
		return 0, errors.New("not an IPFIX message")
	}
	n := 0
	for b := msg[16:]; len(b) >= 4; {
		id, l := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if l < 4 || l > len(b) {
			return n, errors.New("bad set length")
		}
		set := b[4:l]
		b = b[l:]
		switch {
		case id == 2:
			for len(set) >= 4 {
				tid, fields := binary.BigEndian.Uint16(set), int(binary.BigEndian.Uint16(set[2:]))
				set = set[4:]
				size := 0
				for range fields {
					if len(set) < 4 {
						return n, errors.New("short template")
					}
					ie, fl := binary.BigEndian.Uint16(set), int(binary.BigEndian.Uint16(set[2:]))
					set = set[4:]
					if ie&0x8000 != 0 {
						set = set[4:] // enterprise number
					}
					size += fl
				}
				tmpl[tid] = size
			}
		case id >= 256:
			size := tmpl[id]
			if size <= 0 || size == 0xffff {
				return n, fmt.Errorf("data set %d before its template", id)
			}
			n += len(set) / size // the remainder is padding
		}
	}
	return n, nil
}

// recvOTLP is an OTLP/gRPC server that counts log records and accepts
// metrics.
func recvOTLP(args []string) error {
	fs := flag.NewFlagSet("recv-otlp", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:4317", "listen address")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	s := &logsCounter{}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	collogs.RegisterLogsServiceServer(srv, s)
	colmetrics.RegisterMetricsServiceServer(srv, metricsSink{})
	go srv.Serve(ln)
	fmt.Fprintln(os.Stderr, "listening otlp", *addr)
	waitForSignal()
	srv.Stop()
	return printCounts(&counts{Messages: s.requests.Load(), Records: s.records.Load()})
}

type logsCounter struct {
	collogs.UnimplementedLogsServiceServer
	requests, records atomic.Uint64
}

type metricsSink struct {
	colmetrics.UnimplementedMetricsServiceServer
}

func (metricsSink) Export(context.Context, *colmetrics.ExportMetricsServiceRequest) (*colmetrics.ExportMetricsServiceResponse, error) {
	return &colmetrics.ExportMetricsServiceResponse{}, nil
}

func (s *logsCounter) Export(_ context.Context, req *collogs.ExportLogsServiceRequest) (*collogs.ExportLogsServiceResponse, error) {
	s.requests.Add(1)
	for _, rl := range req.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			s.records.Add(uint64(len(sl.LogRecords)))
		}
	}
	return &collogs.ExportLogsServiceResponse{}, nil
}
