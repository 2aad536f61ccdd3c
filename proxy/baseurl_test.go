package proxy

import (
	"strings"
	"testing"
)

// A target URL that ends in an API operation is an error that shows the base URL to use.
func TestLoadURLEndingInAnOperation(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		want      string // "" = valid
	}{
		{"chat completions is an error that shows the base URL", "https://api.openai.com/v1/chat/completions",
			`FAILOVER_TARGET_0_URL="https://api.openai.com/v1/chat/completions": ends in the API operation /chat/completions, which the sidecar appends from each request: use the base URL https://api.openai.com/v1`},
		{"a trailing slash too", "https://api.openai.com/v1/responses/", "use the base URL https://api.openai.com/v1"},
		{"messages", "https://api.anthropic.com/v1/messages", "ends in the API operation /messages, which the sidecar appends from each request: use the base URL https://api.anthropic.com/v1"},
		{"completions", "http://127.0.0.1:8000/v1/completions", "use the base URL http://127.0.0.1:8000/v1"},
		{"embeddings", "https://api.mistral.ai/v1/embeddings", "the API operation /embeddings"},
		{"audio", "https://api.groq.com/openai/v1/audio/transcriptions", "the API operation /audio/transcriptions, which the sidecar appends from each request: use the base URL https://api.groq.com/openai/v1"},
		{"images", "https://api.openai.com/v1/images/generations", "the API operation /images/generations"},
		{"moderations", "https://api.openai.com/v1/moderations", "the API operation /moderations"},
		{"models", "https://api.openai.com/v1/models", "the API operation /models"},
		{"in any case", "https://api.openai.com/v1/Chat/Completions", "the API operation /Chat/Completions"},
		{"the query is kept and masked", "https://x.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21&key=SECRET",
			"use the base URL https://x.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21&key=redacted"},
		{"a base without a version says where it would go", "http://127.0.0.1:8000/chat/completions",
			"use the base URL http://127.0.0.1:8000, with the version segment the provider's SDKs use if it has one (often /v1)"},
		{"a base URL is valid", "https://api.openai.com/v1", ""},
		{"an Azure deployment is valid", "https://x.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21", ""},
		{"an Azure deployment named like an operation is valid", "https://x.openai.azure.com/openai/deployments/embeddings?api-version=2024-10-21", ""},
		{"Azure AI model inference's /models is valid", "https://x.services.ai.azure.com/models?api-version=2024-05-01-preview", ""},
		{"a segment that only ends like an operation is valid", "https://api.example.com/v1/mymodels", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=" + tc.url}, true)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("want an error with %q, got %v", tc.want, err)
			case err != nil && strings.Contains(err.Error(), "SECRET"):
				t.Errorf("the message shows a query value: %v", err)
			}
		})
	}
}
