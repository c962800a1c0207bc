package geminitest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// Transport returns an http.RoundTripper that serves each request with s in
// memory, without sockets, so it works inside a testing/synctest bubble. It
// keeps nothing alive between requests. Use it with BaseURL (any other host
// reaches s too).
//
// It behaves like the network as the SDK sees it: RoundTrip returns once s
// has written the status (or when the request's context is done, with the
// context's error); the body streams, each event reaching the reader as s
// writes it. DropBeforeHeaders makes RoundTrip fail with an error that wraps
// io.EOF; a stream cut after the headers fails the body read with
// io.ErrUnexpectedEOF. When the request's context is done, s stops and a
// pending body read returns the context's error. Closing the body stops s.
// No goroutine outlives the exchange: RoundTrip's error paths and
// Body.Close wait for s to return.
func (s *Server) Transport() http.RoundTripper { return transport{s} }

type transport struct{ h http.Handler }

// errDropped is what RoundTrip wraps when the handler aborts before writing
// its status.
var errDropped = errors.New("geminitest: connection closed before response headers")

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.Clone(ctx)
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}

	pr, pw := io.Pipe()
	rw := &pipeWriter{req: req, header: make(http.Header), pw: pw, headers: make(chan *http.Response, 1)}
	done := make(chan struct{})
	dropped := make(chan struct{})
	// A done request context fails the body read with the context's error.
	stop := context.AfterFunc(req.Context(), func() { pw.CloseWithError(req.Context().Err()) })

	go func() {
		defer close(done)
		defer cancel()
		defer sreq.Body.Close()
		defer func() {
			v := recover()
			switch {
			case v == nil:
				rw.finish()
				// A handler that returned because the request's context is
				// done must not end the body cleanly: the reader gets the
				// context's error, as from the network.
				pw.CloseWithError(req.Context().Err())
			case v == http.ErrAbortHandler && !rw.wroteHeader:
				close(dropped)
			case v == http.ErrAbortHandler:
				pw.CloseWithError(io.ErrUnexpectedEOF)
			default:
				pw.CloseWithError(fmt.Errorf("geminitest: handler panic: %v", v))
				panic(v)
			}
		}()
		t.h.ServeHTTP(rw, sreq)
	}()

	// cleanup ends the handler and waits for it.
	cleanup := func(err error) {
		stop()
		pw.CloseWithError(err)
		cancel()
		<-done
	}
	select {
	case resp := <-rw.headers:
		resp.Body = &pipeBody{pr: pr, cleanup: cleanup}
		return resp, nil
	case <-dropped:
		cleanup(errDropped)
		return nil, fmt.Errorf("%w: %w", errDropped, io.EOF)
	case <-req.Context().Done():
		err := req.Context().Err()
		cleanup(err)
		return nil, err
	}
}

// pipeBody is a response body read from the handler's pipe.
type pipeBody struct {
	pr      *io.PipeReader
	once    sync.Once
	cleanup func(error)
}

func (b *pipeBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

// Close ends the handler (its writes fail, its context is done) and waits
// for it to return.
func (b *pipeBody) Close() error {
	b.once.Do(func() {
		b.pr.CloseWithError(errBodyClosed)
		b.cleanup(errBodyClosed)
	})
	return nil
}

var errBodyClosed = errors.New("geminitest: response body closed")

// pipeWriter is the http.ResponseWriter of an in-memory exchange.
type pipeWriter struct {
	req         *http.Request
	header      http.Header
	pw          *io.PipeWriter
	headers     chan *http.Response // receives the response once, at WriteHeader
	wroteHeader bool
}

func (w *pipeWriter) Header() http.Header { return w.header }

// WriteHeader sends the status and a snapshot of the header to RoundTrip.
// Later calls are ignored, as net/http does.
func (w *pipeWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	w.headers <- &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header.Clone(),
		ContentLength: -1,
		Request:       w.req,
	}
}

// Write sends p to the body reader, blocking until it has read all of it. A
// Write before WriteHeader sends a 200 status first.
func (w *pipeWriter) Write(p []byte) (int, error) {
	w.finish()
	return w.pw.Write(p)
}

// Flush sends the status if it is not sent yet; written bytes are never
// buffered.
func (w *pipeWriter) Flush() { w.finish() }

// finish sends a 200 status if the handler wrote none.
func (w *pipeWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
}
