// Package sdk runs the official Go SDKs (openai-go, anthropic-sdk-go) against the real sidecar,
// started in-process on loopback with scripted fake upstreams behind it, and checks what an app
// sees: the text the SDK's own accumulator builds, and the error its stream reports (docs/streams.md,
// "When a stream is cut after output began"). It is a module of its own so that the product's
// go.mod keeps only the product's dependencies; `go test ./...` in the repository's root does
// not reach it (testdata is left out of ./...), CI runs it from this directory (docs/development.md,
// "Development"). It has only tests.
package sdk
