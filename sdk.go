package geminiguard

import (
	"net/http"

	"google.golang.org/genai"
)

// What the Client hands the SDK: copies of the caller's configs with the
// SDK's own retry and automatic continuation off, so that one SDK call is one
// HTTP request and attempts cannot multiply behind the limiter's back.

// callConfig returns the config to send: a shallow copy of the caller's with
// the SDK's automatic continuation and retry off. The caller's value is never
// modified, not even by the SDK (which sets a missing SystemInstruction role
// in place).
func callConfig(user *genai.GenerateContentConfig, sdkRetries bool) *genai.GenerateContentConfig {
	if user == nil {
		if sdkRetries {
			return defaultCallConfigNoRetry
		}
		return defaultCallConfig
	}
	cfg := *user
	cfg.AutomaticContinuation = noContinuation
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, sdkRetries)
	if si := cfg.SystemInstruction; si != nil && si.Role == "" {
		withRole := *si
		withRole.Role = genai.RoleUser
		cfg.SystemInstruction = &withRole
	}
	return &cfg
}

// configFor returns the config to send m: sent itself, or, when m has a
// WithModelConfig adjustment, a copy of user (the caller's) adjusted, with
// the SDK's retry and automatic continuation kept off and the
// continuation token of sent (a hop's) kept.
func configFor(m *modelState, user, sent *genai.GenerateContentConfig, sdkRetries bool) *genai.GenerateContentConfig {
	if m.adjust == nil {
		return sent
	}
	var cfg genai.GenerateContentConfig
	if user != nil {
		cfg = *user
	}
	m.adjust(&cfg)
	cfg.ContinuationToken = sent.ContinuationToken
	return callConfig(&cfg, sdkRetries)
}

// countConfig returns a copy of the caller's config with the SDK's retry off.
func countConfig(user *genai.CountTokensConfig, sdkRetries bool) *genai.CountTokensConfig {
	var cfg genai.CountTokensConfig
	if user != nil {
		cfg = *user
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, sdkRetries)
	return &cfg
}

// embedConfig returns a copy of the caller's config with the SDK's retry off.
func embedConfig(user *genai.EmbedContentConfig, sdkRetries bool) *genai.EmbedContentConfig {
	var cfg genai.EmbedContentConfig
	if user != nil {
		cfg = *user
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, sdkRetries)
	return &cfg
}

// withoutSDKRetry returns per-call HTTPOptions that keep the SDK's own retry
// off and that the SDK will not write to: it fills in missing Headers in
// place. It returns opts itself when neither applies.
func withoutSDKRetry(opts *genai.HTTPOptions, sdkRetries bool) *genai.HTTPOptions {
	if opts == nil {
		if sdkRetries {
			return noRetryOptions
		}
		return nil
	}
	retries := sdkRetries || opts.RetryOptions != nil
	if !retries && opts.Headers != nil {
		return opts
	}
	out := *opts
	if retries {
		out.RetryOptions = noRetry
	}
	if out.Headers == nil {
		out.Headers = noHeaders
	}
	return &out
}

// Shared, read-only values of callConfig. The SDK only reads them: it fills
// in a per-call HTTPOptions.Headers when that is nil (a data race on a shared
// value), so noRetryOptions carries an empty map it merges from instead.
var (
	noRetry                  = &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}
	noHeaders                = http.Header{}
	noRetryOptions           = &genai.HTTPOptions{RetryOptions: noRetry, Headers: noHeaders}
	noContinuation           = genai.Ptr(false)
	defaultCallConfig        = &genai.GenerateContentConfig{AutomaticContinuation: noContinuation}
	defaultCallConfigNoRetry = &genai.GenerateContentConfig{AutomaticContinuation: noContinuation, HTTPOptions: noRetryOptions}
)
