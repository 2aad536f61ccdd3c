package classify

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// ErrorInfo is what an error body says about itself. Code, Type and Message are views into
// the body or into the parser that read it: valid only while that parser is held.
type ErrorInfo struct {
	Status  int // a status the body carries or maps to (400–599); 0 when it names none
	Code    []byte
	Type    []byte
	Message []byte
	JSON    bool // the body parsed as JSON
}

// maxJSONBytes bounds the bodies parsed as JSON. Error bodies are small; a larger body is
// matched as text (its first maxTextBytes), so a pooled parser never keeps a huge copy.
const (
	maxJSONBytes = 1 << 20
	maxTextBytes = 64 << 10
)

var parsers fastjson.ParserPool

// anthropicTypes maps Anthropic error types to the status Anthropic sends with them.
var anthropicTypes = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"overloaded_error":      529,
}

// codeStatuses maps string error codes (OpenAI) and status names (Google) to statuses.
var codeStatuses = map[string]int{
	"rate_limit_exceeded": 429,
	"insufficient_quota":  429,
	"server_error":        500,
	"RESOURCE_EXHAUSTED":  429,
	"UNAVAILABLE":         503,
	"INTERNAL":            500,
	"DEADLINE_EXCEEDED":   504,
	"NOT_FOUND":           404,
	"PERMISSION_DENIED":   403,
	"UNAUTHENTICATED":     401,
	"INVALID_ARGUMENT":    400,
}

// quotaCodes are error codes or types that mean the account is out of money or quota, not
// just rate limited: retrying the same key cannot help.
var quotaCodes = [...]string{
	"insufficient_quota",
	"quota_exceeded",
	"billing_hard_limit_reached",
	"billing_not_active",
	"exceeded_current_quota",
}

// ExtractError reads the error an upstream body describes, in any of the shapes providers use:
// OpenAI {"error":{...}}, Anthropic {"type":"error","error":{...}}, a Responses error event
// {"type":"error","code":...}, {"type":"response.failed","response":{"error":{...}}}, Google's
// [{"error":{...}}], {"error":"text"} and top-level {"message":...}. A body that is not JSON
// is its own message (its first 64 KiB). The result's slices point into body or into p:
// they are valid until p parses again. p must not be used concurrently.
func ExtractError(p *fastjson.Parser, body []byte) ErrorInfo {
	var info ErrorInfo
	if len(body) > maxJSONBytes {
		info.Message = textPrefix(body)
		return info
	}
	v, err := p.ParseBytes(body)
	if err != nil {
		info.Message = textPrefix(body)
		return info
	}
	info.JSON = true
	if v.Type() == fastjson.TypeArray {
		arr, _ := v.Array()
		if len(arr) == 0 {
			return info
		}
		v = arr[0]
	}
	if v.Type() != fastjson.TypeObject {
		return info
	}
	e := v.Get("error")
	switch {
	case e != nil && e.Type() == fastjson.TypeObject:
		readErrorFields(&info, e)
	case e != nil && e.Type() == fastjson.TypeString:
		readErrorFields(&info, v) // a sibling code or type, if any
		info.Message, _ = e.StringBytes()
	default:
		if r := v.Get("response", "error"); r != nil && r.Type() == fastjson.TypeObject {
			readErrorFields(&info, r)
		} else {
			readErrorFields(&info, v)
			if len(info.Message) == 0 {
				info.Message = v.GetStringBytes("detail")
			}
		}
	}
	if info.Status == 0 {
		info.Status = mappedStatus(info.Type, info.Code)
	}
	return info
}

// readErrorFields fills code, type, message and a carried status from an error object.
func readErrorFields(info *ErrorInfo, e *fastjson.Value) {
	info.Message = e.GetStringBytes("message")
	info.Type = e.GetStringBytes("type")
	if c := e.Get("code"); c != nil {
		switch c.Type() {
		case fastjson.TypeNumber:
			if n, err := c.Int(); err == nil && n >= 400 && n <= 599 {
				info.Status = n
			}
		case fastjson.TypeString:
			info.Code, _ = c.StringBytes()
			if n := threeDigitStatus(info.Code); n != 0 {
				info.Status = n
			}
		}
	}
	if s := e.Get("status"); s != nil {
		switch s.Type() {
		case fastjson.TypeNumber:
			if n, err := s.Int(); err == nil && n >= 400 && n <= 599 && info.Status == 0 {
				info.Status = n
			}
		case fastjson.TypeString:
			if len(info.Type) == 0 {
				info.Type, _ = s.StringBytes()
			}
		}
	}
}

// mappedStatus maps a provider error type or code to a status, or 0.
func mappedStatus(typ, code []byte) int {
	if n, ok := anthropicTypes[string(typ)]; ok { // map lookups with string(b) do not allocate
		return n
	}
	if n, ok := codeStatuses[string(code)]; ok {
		return n
	}
	if n, ok := codeStatuses[string(typ)]; ok {
		return n
	}
	return 0
}

func threeDigitStatus(b []byte) int {
	if len(b) != 3 {
		return 0
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	if n < 400 || n > 599 {
		return 0
	}
	return n
}

// isQuota reports whether an error's code or type names quota or billing exhaustion.
func isQuota(info *ErrorInfo) bool {
	for _, q := range quotaCodes {
		if string(info.Code) == q || string(info.Type) == q {
			return true
		}
	}
	return false
}

// contextWindowCodes are error codes or types that say the prompt (with the requested output)
// does not fit the model's context window: OpenAI, Azure, Groq and DeepSeek's
// context_length_exceeded, llama.cpp's exceed_context_size_error.
var contextWindowCodes = [...]string{"context_length_exceeded", "exceed_context_size_error", "context_window_exceeded"}

// contextWindowPhrases are what providers write in the message when the prompt is too long
// for the model (lower case; matched as substrings, ASCII case-insensitive): OpenAI, vLLM,
// DeepSeek and Mistral ("This model's maximum context length is 128000 tokens"), Anthropic
// ("prompt is too long: 208310 tokens > 200000 maximum"), llama.cpp ("the request exceeds the
// available context size"), Bedrock ("Input is too long for requested model"), Gemini ("The
// input token count (X) exceeds the maximum number of tokens allowed"), and the wordings
// that name the window itself.
var contextWindowPhrases = [...][]byte{
	[]byte("maximum context length"), []byte("context length exceeded"), []byte("context window"),
	[]byte("context size"), []byte("prompt is too long"), []byte("input is too long"),
	[]byte("exceeds the maximum number of tokens"), []byte("reduce the length of the messages"),
}

// isContextWindow reports whether an error says the prompt exceeds the model's context window,
// read from its code, type and message.
func isContextWindow(info *ErrorInfo) bool {
	for _, c := range contextWindowCodes {
		if string(info.Code) == c || string(info.Type) == c {
			return true
		}
	}
	for _, p := range contextWindowPhrases {
		if containsFold(info.Message, p) {
			return true
		}
	}
	return false
}

func textPrefix(body []byte) []byte {
	if len(body) > maxTextBytes {
		return body[:maxTextBytes]
	}
	return body
}

// fakeSuccess inspects a non-streaming 200 body for the three ways a provider says "failed"
// with a 200: nothing at all, a top-level error, or a chat completion without choices. It
// returns ClassNone when the body looks like a real answer. A cheap byte scan rules out
// the common case before any JSON is parsed.
func fakeSuccess(p *fastjson.Parser, body []byte, chat bool) (Class, int) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return ClassEmptyResponse, 502
	}
	if trimmed[0] != '{' || len(trimmed) > maxJSONBytes {
		return ClassNone, 0
	}
	suspectError := hasKeyToken(trimmed, keyError)
	suspectChoices := chat && hasEmptyArrayToken(trimmed, keyChoices)
	if !suspectError && !suspectChoices {
		return ClassNone, 0
	}
	v, err := p.ParseBytes(trimmed)
	if err != nil || v.Type() != fastjson.TypeObject {
		return ClassNone, 0
	}
	if e := v.Get("error"); suspectError && e != nil && e.Type() != fastjson.TypeNull {
		info := ExtractError(p, trimmed)
		if info.Status == 0 {
			return ClassErrorBody, 502
		}
		return ClassErrorBody, info.Status
	}
	if c := v.Get("choices"); suspectChoices && c != nil && c.Type() == fastjson.TypeArray {
		if arr, _ := c.Array(); len(arr) == 0 {
			return ClassNoChoices, 502
		}
	}
	return ClassNone, 0
}

var (
	keyError   = []byte(`"error"`)
	keyChoices = []byte(`"choices"`)
)

// hasKeyToken reports whether key (quoted) occurs followed by optional spaces and a colon:
// a JSON key somewhere in the document, not the same word inside a string. It and
// hasEmptyArrayToken are prefilters, not a JSON scanner: they only decide whether fastjson
// parses the body, and fastjson's reading decides.
func hasKeyToken(b, key []byte) bool {
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return false
		}
		rest := skipSpace(b[i+len(key):])
		if len(rest) > 0 && rest[0] == ':' {
			return true
		}
		b = b[i+1:]
	}
}

// hasEmptyArrayToken reports whether key occurs as `"key" : [ ]` anywhere. It looks for
// each ']' and reads back from it: a success has one or two, where a search for the key
// would stop at every quote of the body (BENCHMARKS.md, "The tail and the stream path").
func hasEmptyArrayToken(b, key []byte) bool {
	for {
		i := bytes.IndexByte(b, ']')
		if i < 0 {
			return false
		}
		before := skipSpaceBack(b[:i])
		if n := len(before); n > 0 && before[n-1] == '[' {
			before = skipSpaceBack(before[:n-1])
			if n := len(before); n > 0 && before[n-1] == ':' && bytes.HasSuffix(skipSpaceBack(before[:n-1]), key) {
				return true
			}
		}
		b = b[i+1:]
	}
}

// skipSpaceBack is skipSpace from the end.
func skipSpaceBack(b []byte) []byte {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}
