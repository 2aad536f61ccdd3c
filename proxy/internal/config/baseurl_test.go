package config

import (
	"os"
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

// A target on a well-known provider's host without the base path its SDKs use gets a warning
// (not an error) that shows the base URL; one with it gets none.
func TestLoadWarnsAboutAProviderHostWithoutItsBasePath(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // the warning's text after the variable; "" = no warning
	}{
		{"https://api.openai.com/v1", ""},
		{"https://api.openai.com", "the base URL for OpenAI is https://api.openai.com/v1: a request for /v1/chat/completions would go to https://api.openai.com/chat/completions"},
		{"https://API.OpenAI.com/", "the base URL for OpenAI is https://API.OpenAI.com/v1"},
		{"https://api.anthropic.com/v1", ""},
		{"https://api.anthropic.com", "the base URL for Anthropic is https://api.anthropic.com/v1"},
		{"https://res.openai.azure.com/openai/v1", ""},
		{"https://res.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21", ""},
		{"https://res.openai.azure.com/openai?api-version=2024-10-21", "the base URL for Azure OpenAI is https://res.openai.azure.com/openai/v1 or https://res.openai.azure.com/openai/deployments/<deployment>"},
		{"https://res.openai.azure.com/openai/deployments", "the base URL for Azure OpenAI is"},
		{"https://res.cognitiveservices.azure.com/openai/v1", ""},
		{"https://res.cognitiveservices.azure.com/v1", "the base URL for Azure OpenAI is"},
		{"https://generativelanguage.googleapis.com/v1beta/openai/", ""},
		{"https://generativelanguage.googleapis.com/v1beta", "the base URL for Gemini's OpenAI-compatible API is https://generativelanguage.googleapis.com/v1beta/openai"},
		{"https://api.groq.com/openai/v1", ""},
		{"https://api.groq.com/v1", "the base URL for Groq is https://api.groq.com/openai/v1"},
		{"https://api.mistral.ai/v1", ""},
		{"https://api.mistral.ai", "the base URL for Mistral is https://api.mistral.ai/v1"},
		{"https://openrouter.ai/api/v1", ""},
		{"https://openrouter.ai/v1", "the base URL for OpenRouter is https://openrouter.ai/api/v1"},
		{"https://api.deepseek.com", ""},
		{"https://api.deepseek.com/v1", ""},
		{"https://api.deepseek.com/beta", ""},
		{"https://api.deepseek.com/anthropic/v1", ""},
		{"https://api.deepseek.com/anthropic", "the base URL for DeepSeek is https://api.deepseek.com/v1 or https://api.deepseek.com or https://api.deepseek.com/beta or https://api.deepseek.com/anthropic/v1"},
		{"https://api.together.xyz/v1", ""},
		{"https://api.together.ai", "the base URL for Together AI is https://api.together.ai/v1"},
		{"https://api.fireworks.ai/inference/v1", ""},
		{"https://api.fireworks.ai/v1", "the base URL for Fireworks AI is https://api.fireworks.ai/inference/v1"},
		{"https://api.x.ai/v1", ""},
		{"https://api.x.ai", "the base URL for xAI is https://api.x.ai/v1"},
		{"https://api.cerebras.ai/v1", ""},
		{"https://api.cerebras.ai", "the base URL for Cerebras is https://api.cerebras.ai/v1"},
		{"http://127.0.0.1:8000", ""}, // an unknown host: its path is its own business
		{"https://openai.example.com", ""},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := Load([]string{"FAILOVER_TARGET_0_URL=" + tc.url}, true)
			if err != nil {
				t.Fatalf("a warning is not an error: %v", err)
			}
			switch {
			case tc.want == "" && len(c.Warnings) > 0:
				t.Errorf("want no warning, got %v", c.Warnings)
			case tc.want != "" && (len(c.Warnings) != 1 || c.Warnings[0].Variable != "FAILOVER_TARGET_0_URL" ||
				!strings.HasPrefix(c.Warnings[0].Message, `FAILOVER_TARGET_0_URL="`) || !strings.Contains(c.Warnings[0].Message, tc.want)):
				t.Errorf("want one warning with %q, got %v", tc.want, c.Warnings)
			}
		})
	}
	t.Run("an operation on a provider's host shows its base URL", func(t *testing.T) {
		_, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.groq.com/chat/completions"}, true)
		if err == nil || !strings.Contains(err.Error(), "use the base URL https://api.groq.com/openai/v1") {
			t.Errorf("got %v", err)
		}
	})
}

// Every provider the warning knows is listed in the configuration reference.
func TestProviderBasesAreInTheReference(t *testing.T) {
	b, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, p := range providerBases {
		host := "`" + p.host + "`"
		if strings.HasPrefix(p.host, ".") {
			host = "`*" + p.host + "`"
		}
		var row string
		for _, l := range lines {
			if strings.HasPrefix(l, "|") && strings.Contains(l, host) {
				row = l
			}
		}
		if row == "" {
			t.Errorf("no row for %s", host)
			continue
		}
		for _, base := range p.bases {
			want := base
			if !strings.HasPrefix(p.host, ".") {
				want = "https://" + p.host + base
			}
			if !strings.Contains(row, "`"+want+"`") {
				t.Errorf("the row for %s lacks `%s`: %s", host, want, row)
			}
		}
	}
}
