// Command calltrace lists the functions of the root package that one
// GenerateContent (or GenerateContentStream) call enters, on a warm Client
// against the fake: the figure of BENCHMARKS.md's "One call, traced". It
// must be built with coverage of the root package; run.sh does that:
//
//	examples/internal/calltrace/run.sh unary
//	examples/internal/calltrace/run.sh stream
package main

import (
	"context"
	"flag"
	"log"
	"runtime/coverage"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

func main() {
	dir := flag.String("out", "", "the directory the coverage counters of the one traced call are written to")
	stream := flag.Bool("stream", false, "trace GenerateContentStream instead of GenerateContent")
	flag.Parse()
	ctx := context.Background()
	const primary, secondary = "gemini-2.5-pro", "gemini-2.5-flash-lite"
	srv := geminitest.New(geminitest.Model{Name: primary}, geminitest.Model{Name: secondary})
	gc, err := genai.NewClient(ctx, srv.ClientConfig())
	if err != nil {
		log.Fatal(err)
	}
	c, err := geminiguard.New(ctx, geminiguard.WithGenAIClient(gc), geminiguard.WithCascade(primary, secondary))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	call := func() {
		if *stream {
			for _, err := range c.GenerateContentStream(ctx, "", genai.Text("hi"), nil) {
				if err != nil {
					log.Fatal(err)
				}
			}
			return
		}
		if _, err := c.GenerateContent(ctx, "", genai.Text("hi"), nil); err != nil {
			log.Fatal(err)
		}
	}
	call() // warm: what runs once per Client or per model is not the call's
	call()
	if err := coverage.ClearCounters(); err != nil {
		log.Fatal(err)
	}
	call()
	if err := coverage.WriteMetaDir(*dir); err != nil {
		log.Fatal(err)
	}
	if err := coverage.WriteCountersDir(*dir); err != nil {
		log.Fatal(err)
	}
}
