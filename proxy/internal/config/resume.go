package config

import (
	"fmt"
	"strings"
)

// ResumeConfig is the FAILOVER_RESUME section (docs/streams.md, Resume a cut stream): read
// once at start, immutable afterwards.
type ResumeConfig struct {
	Mode string `env:"RESUME" envDefault:"off"` // on, off
	Max  int    `env:"RESUME_MAX" envDefault:"1"`
	// Instruction is the user message that asks for a continuation by instruction; empty:
	// DefaultResumeInstruction.
	Instruction string `env:"RESUME_INSTRUCTION"`
}

// DefaultResumeInstruction is what a continuation by instruction asks when
// FAILOVER_RESUME_INSTRUCTION is not set (docs/streams.md, Resume a cut stream).
const DefaultResumeInstruction = "Your previous reply was cut off. Continue it from exactly where it stopped, " +
	"even in the middle of a word or a sentence: start with the very next character (a space, if one comes next), " +
	"do not repeat anything already written, and add no preamble or comment."

// maxResumeInstruction bounds FAILOVER_RESUME_INSTRUCTION: it is sent with every continuation
// by instruction.
const maxResumeInstruction = 4 << 10

// EffectiveInstruction is the user message a continuation by instruction is asked with:
// Instruction, or DefaultResumeInstruction when it is empty.
func (c *ResumeConfig) EffectiveInstruction() string {
	if c.Instruction == "" {
		return DefaultResumeInstruction
	}
	return c.Instruction
}

// On reports whether cut streams may be resumed: FAILOVER_RESUME=on, and FAILOVER_RESUME_MAX
// lets one be. With FAILOVER_RESUME_MAX=0 none can, and no stream pays for a resume (as off).
func (c *ResumeConfig) On() bool { return c.Mode == "on" && c.Max > 0 }

// ResumeMode is how a target continues an answer (FAILOVER_TARGET_<i>_RESUME).
type ResumeMode uint8

// The values of FAILOVER_TARGET_<i>_RESUME.
const (
	ResumeNone     ResumeMode = iota // not resumable
	ResumePrefill                    // a trailing assistant message (Anthropic before Claude 4.6; chat servers that take it as a prefix)
	ResumePrefix                     // chat: a trailing assistant message with "prefix": true (DeepSeek, Mistral)
	ResumeContinue                   // chat: a trailing assistant message and "continue_final_message": true (vLLM)
	ResumeInstruct                   // the delivered text as an assistant message, then a user message asking to continue it
	ResumeAuto                       // prefill; by instruction where the target refuses the prefill (learnt per model)
)

var resumeModeNames = [...]string{ResumeNone: "", ResumePrefill: "prefill", ResumePrefix: "prefix", ResumeContinue: "continue",
	ResumeInstruct: "instruct", ResumeAuto: "auto"}

const resumeModeHelp = "must be prefill, prefix, continue, instruct, auto, or empty (not resumable)"

// String returns the mode as FAILOVER_TARGET_<i>_RESUME writes it: "" for ResumeNone.
func (m ResumeMode) String() string { return resumeModeNames[m] }

// parseResumeMode reads a _RESUME value (any case); ok is false for an unknown one.
func parseResumeMode(s string) (m ResumeMode, ok bool) {
	for i, name := range resumeModeNames {
		if strings.EqualFold(s, name) {
			return ResumeMode(i), true
		}
	}
	return ResumeNone, false
}

// ParseResumeMode reads a _RESUME value (any case), for a TargetConfig built in code: Load
// refuses an unknown one, and a configuration built otherwise must not be resumed some other way.
func ParseResumeMode(s string) (ResumeMode, error) {
	m, ok := parseResumeMode(s)
	if !ok {
		return ResumeNone, fmt.Errorf("RESUME=%q: %s", s, resumeModeHelp)
	}
	return m, nil
}

// validateResume checks FAILOVER_RESUME, FAILOVER_RESUME_MAX and each target's _RESUME.
func (l *loader) validateResume(c *Config) {
	r := &c.Resume
	r.Mode = strings.ToLower(r.Mode)
	if modes := []string{"on", "off"}; !contains(modes, r.Mode) {
		l.problem("%s: must be on or off%s", l.shown(envPrefix+"RESUME"), valueHint(r.Mode, modes))
	}
	if r.Max < 0 {
		l.problem("%s: must be >= 0", l.shown(envPrefix+"RESUME_MAX"))
	}
	switch {
	case r.Instruction != "" && strings.TrimSpace(r.Instruction) == "":
		l.problem("%s: must not be blank (unset it for the default)", l.shown(envPrefix+"RESUME_INSTRUCTION"))
	case len(r.Instruction) > maxResumeInstruction:
		l.problem("%s: must be at most %d bytes, is %d", envPrefix+"RESUME_INSTRUCTION", maxResumeInstruction, len(r.Instruction))
	}
	for i := range c.Targets {
		t := &c.Targets[i]
		m, ok := parseResumeMode(t.Resume)
		if !ok {
			l.problem("%s: %s%s", l.shown(fmt.Sprintf("%sTARGET_%d_RESUME", envPrefix, i)), resumeModeHelp, valueHint(t.Resume, resumeModeNames[1:]))
			continue
		}
		t.Resume = resumeModeNames[m]
	}
}
