// Command observe shows geminiguard's OpenTelemetry metrics and traces: the
// OTel SDK with a Prometheus exporter serving /metrics and the stdout trace
// exporter, while a two-model cascade on the embedded fake Gemini goes
// through a short outage in real time. The primary answers 503 for a few
// seconds (for one of them the secondary too, and a cache of earlier
// answers stands in as the Fallback); every tenth prompt is one the fake
// blocks. Each call's span prints as one line; at the end the program
// fetches /metrics once and prints its series (buckets left out).
//
//	go run ./examples/observe                 # about 8 s, then exits
//	go run ./examples/observe -serve          # replays the outage and serves /metrics until Ctrl-C
//	go run ./examples/observe -spans json     # the stdout exporter's own pretty-printed JSON
//
// examples/observe/grafana-dashboard.json is a Grafana dashboard for these
// metrics: point a Prometheus at -addr (default 127.0.0.1:9464) and import
// it. The program only listens on loopback addresses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "serve /metrics on this loopback address")
	serve := flag.Bool("serve", false, "keep replaying the outage and serving /metrics until Ctrl-C (or -for)")
	serveFor := flag.Duration("for", 0, "with -serve: stop after this long (0: until Ctrl-C)")
	spans := flag.String("spans", "lines", "how spans print: lines (one line per call) or json (the stdout exporter's pretty-printed JSON)")
	flag.Parse()
	log.SetOutput(io.Discard) // the genai SDK logs through the standard logger; the spans say it all

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *serve && *serveFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *serveFor)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, *addr, *serve, *spans == "json"); err != nil {
		fmt.Fprintln(os.Stderr, "observe:", err)
		os.Exit(1)
	}
}

// run serves /metrics on addr and plays the outage: once, then prints a
// sample of /metrics; with serve, again and again until ctx ends.
func run(ctx context.Context, out io.Writer, addr string, serve, jsonSpans bool) error {
	if err := checkLoopback(addr); err != nil {
		return err
	}
	d, err := newDemo(ctx, out, defaultScript, jsonSpans)
	if err != nil {
		return err
	}
	defer d.close()

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
		<-served
	}()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(out, "serving %s\n%s\n\n", url, defaultScript)

	for {
		if err := d.play(ctx, out); err != nil {
			if serve && ctx.Err() != nil {
				return nil // Ctrl-C or -for
			}
			return err
		}
		if !serve {
			break
		}
	}
	body, err := fetch(ctx, url)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s (a sample: _bucket series left out)\n", url)
	return writeSample(out, body)
}

// checkLoopback refuses an address that is not on a loopback interface:
// the example serves metrics only to this machine.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-addr %q: only loopback addresses (127.0.0.1, [::1], localhost)", addr)
}

// fetch GETs url once and returns its body.
func fetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New("GET " + url + ": " + resp.Status)
	}
	return io.ReadAll(resp.Body)
}
