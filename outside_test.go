package geminiguard_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOutsideModuleImportsGeminitest builds what a user has: a module of its
// own (example.com/chatapp) whose HTTP handler calls Gemini through
// geminiguard, and whose tests import geminitest to put that handler through
// a 503 and a cut stream, in fake time. It proves geminitest is importable
// from another module (internal/ would not be) and enough to test such code.
// The module requires this repository through a replace directive and the
// versions of this module's go.mod, so `go test` resolves everything from the
// module cache, offline; its go line is the root's (go 1.25), and its
// module graph holds no go-redis. It skips with -short or without the go
// command.
func TestOutsideModuleImportsGeminitest(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: builds and tests a separate module with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot build the outside module")
	}
	root, err := os.Getwd() // the package directory: the repository root
	require.NoError(t, err)
	rootMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	rootSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	// This module's requirements, so the outside module builds against the
	// versions this repository is tested with, all in the module cache.
	mod, ok := strings.CutPrefix(string(rootMod), "module github.com/geminiguard/geminiguard\n")
	require.True(t, ok, "go.mod does not start with the module line")
	mod = "module example.com/chatapp\n" + mod +
		"\nrequire github.com/geminiguard/geminiguard v0.0.0\n" +
		"\nreplace github.com/geminiguard/geminiguard => " + root + "\n"

	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":       mod,
		"go.sum":       string(rootSum),
		"chat.go":      outsideHandler,
		"chat_test.go": outsideHandlerTest,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "test", "-count=1", "-v", ".")
	cmd.Dir = dir
	// -mod=mod lets go add go.sum lines from the module cache; GOPROXY,
	// GOMODCACHE and GOCACHE are the caller's. No go.work applies.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go test in the outside module:\n%s", out)
	for _, name := range []string{"TestAskSurvivesA503", "TestStreamSurvivesACut"} {
		require.Contains(t, string(out), "--- PASS: "+name, "go test output:\n%s", out)
	}

	// A user of the root package alone does not get Redis's client: it
	// comes with the redisstore module only.
	list := exec.CommandContext(ctx, goCmd, "list", "-m", "all")
	list.Dir, list.Env = dir, cmd.Env
	mods, err := list.CombinedOutput()
	require.NoError(t, err, "go list -m all:\n%s", mods)
	require.NotContains(t, string(mods), "go-redis", "the modules of a module that imports only the root package")
}

// outsideHandler is the user's code: an HTTP handler that asks Gemini
// through geminiguard, unary and streamed.
const outsideHandler = `// Package chatapp answers questions over HTTP with Gemini.
package chatapp

import (
	"context"
	"fmt"
	"net/http"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
)

// NewClient is the app's geminiguard configuration; opts come last (tests
// pass the SDK client pointed at the fake).
func NewClient(ctx context.Context, opts ...geminiguard.Option) (*geminiguard.Client, error) {
	base := []geminiguard.Option{
		geminiguard.WithCascade("gemini-2.5-flash", "gemini-2.5-flash-lite"),
		geminiguard.WithStreamResume(true),
	}
	return geminiguard.New(ctx, append(base, opts...)...)
}

// Handler serves GET /ask?q= (one answer) and GET /stream?q= (the answer as
// it is generated).
type Handler struct{ Gemini *geminiguard.Client }

func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := genai.Text(r.URL.Query().Get("q"))
	switch r.URL.Path {
	case "/ask":
		resp, err := h.Gemini.GenerateContent(r.Context(), "", q, nil)
		if err != nil {
			http.Error(w, "the model is unavailable", http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, resp.Text())
	case "/stream":
		for chunk, err := range h.Gemini.GenerateContentStream(r.Context(), "", q, nil) {
			if err != nil {
				fmt.Fprint(w, "\n[answer cut]")
				return
			}
			fmt.Fprint(w, chunk.Text())
		}
	default:
		http.NotFound(w, r)
	}
}
`

// outsideHandlerTest is the user's test of it with geminitest.
const outsideHandlerTest = `package chatapp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"

	"google.golang.org/genai"

	"example.com/chatapp"
	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

const answer = "Paris is the capital of France."

// serve builds the app's handler on a geminiguard Client that reaches fake
// in memory (so the bubble's fake time applies).
func serve(t *testing.T, fake *geminitest.Server) http.Handler {
	sdk, err := genai.NewClient(t.Context(), fake.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	c, err := chatapp.NewClient(t.Context(), geminiguard.WithGenAIClient(sdk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return chatapp.Handler{Gemini: c}
}

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

func TestAskSurvivesA503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(
			geminitest.Model{Name: "gemini-2.5-flash", Text: answer, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: "gemini-2.5-flash-lite", Text: answer},
		)
		w := get(serve(t, fake), "/ask?q=capital+of+France")
		if w.Code != http.StatusOK || w.Body.String() != answer {
			t.Fatalf("got %d %q, want 200 %q", w.Code, w.Body.String(), answer)
		}
		if got := fake.Total("gemini-2.5-flash") + fake.Total("gemini-2.5-flash-lite"); got != 2 {
			t.Errorf("got %d requests to Gemini, want 2 (the 503 and the answer)", got)
		}
	})
}

func TestStreamSurvivesACut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(
			geminitest.Model{Name: "gemini-2.5-flash", Text: answer, Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween}}},
			geminitest.Model{Name: "gemini-2.5-flash-lite", Text: answer},
		)
		w := get(serve(t, fake), "/stream?q=capital+of+France")
		if w.Body.String() != answer {
			t.Fatalf("got %q, want the whole answer %q", w.Body.String(), answer)
		}
		streams := fake.Hits("gemini-2.5-flash", geminitest.VerbStream) + fake.Hits("gemini-2.5-flash-lite", geminitest.VerbStream)
		if streams != 2 {
			t.Errorf("got %d stream requests, want 2 (the cut one and its resume)", streams)
		}
	})
}
`
