package geminiguard

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestModelFamily(t *testing.T) {
	for model, want := range map[string]string{
		"gemini-2.5-flash":                    "gemini-2.5-flash",
		"models/gemini-2.0-flash-001":         "gemini-2.0-flash",
		"gemini-flash-latest":                 "gemini-flash",
		"gemini-2.5-flash-preview-05-20":      "gemini-2.5-flash",
		"gemini-2.5-flash-lite-preview-06-17": "gemini-2.5-flash-lite",
		"gemini-3-pro-preview":                "gemini-3-pro",
		"gemini-embedding-001":                "gemini-embedding",
		"gemini-2.5-flash-8b":                 "gemini-2.5-flash-8b",
	} {
		assert.Equal(t, want, modelFamily(model), model)
	}
}
