// Command cascade-doctor checks a model cascade against the Gemini API: does
// every model exist for this key, which generation is it, what are its token
// limits, when is it announced to shut down. It exits with status 1 when the
// cascade is unhealthy, so it can run as a weekly CI job.
//
//	GEMINI_API_KEY=... go run ./examples/cascade-doctor -cascade gemini-2.5-pro,gemini-2.5-flash
//
// Without GEMINI_API_KEY it checks against the embedded fake Gemini, where
// one model of the default cascade is retired.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

func main() {
	cascade := flag.String("cascade", "gemini-2.5-flash,gemini-2.5-flash-lite,gemini-2.0-flash", "models to check, primary first, comma-separated")
	flag.Parse()
	healthy, err := run(context.Background(), os.Stdout, strings.Split(*cascade, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cascade-doctor:", err)
		os.Exit(2)
	}
	if !healthy {
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, cascade []string) (bool, error) {
	opts := []geminiguard.Option{geminiguard.WithCascade(cascade...), geminiguard.WithStartupCheck(false)}
	if key := os.Getenv("GEMINI_API_KEY"); key != "" {
		fmt.Fprintln(out, "Checking against the Gemini API (GEMINI_API_KEY is set).")
		opts = append(opts, geminiguard.WithAPIKey(key))
	} else {
		fmt.Fprintln(out, "No GEMINI_API_KEY: checking against the embedded fake Gemini, where gemini-2.0-flash is retired.")
		fake := geminitest.New(
			geminitest.Model{Name: "gemini-2.5-flash", InputTokenLimit: 1048576, OutputTokenLimit: 65536},
			geminitest.Model{Name: "gemini-2.5-flash-lite", InputTokenLimit: 1048576, OutputTokenLimit: 65536},
			geminitest.Model{Name: "gemini-2.0-flash", Unlisted: true},
		)
		opts = append(opts, geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL), geminiguard.WithHTTPClient(fake.HTTPClient()))
	}
	c, err := geminiguard.New(ctx, opts...)
	if err != nil {
		return false, err
	}
	defer c.Close()
	report, err := c.CheckCascade(ctx)
	if err != nil && !errors.Is(err, geminiguard.ErrModelNotFound) {
		return false, err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nMODEL\tEXISTS\tGENERATION\tINPUT TOKENS\tOUTPUT TOKENS\tSHUTDOWN\tDAYS LEFT\tVERDICT")
	for _, m := range report.Models {
		shutdown, days := "-", "-"
		if m.Shutdown != nil {
			shutdown, days = m.Shutdown.Date.Format(time.DateOnly), fmt.Sprint(m.DaysLeft)
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Model, yesNo(m.Exists), orDash(m.Generation),
			count(m.InputTokenLimit), count(m.OutputTokenLimit), shutdown, days, m.Verdict)
	}
	tw.Flush()
	for _, w := range report.Warnings {
		fmt.Fprintln(out, "warning:", w)
	}
	if err != nil {
		fmt.Fprintln(out, "error:", err)
	}
	if report.Healthy() {
		fmt.Fprintln(out, "\nThe cascade is healthy.")
		return true, nil
	}
	fmt.Fprintln(out, "\nThe cascade is unhealthy: fix the models above before they fail in production.")
	return false, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func count(n int32) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
