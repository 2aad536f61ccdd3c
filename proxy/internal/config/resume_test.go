package config

import (
	"os"
	"strings"
	"testing"
)

// FAILOVER_RESUME, FAILOVER_RESUME_MAX and FAILOVER_TARGET_<i>_RESUME (docs/configuration.md):
// off by default; a bad value is an error that names the variable; -check shows them.
func TestLoadResume(t *testing.T) {
	base := []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_1_URL=http://b/v1"}
	c, err := Load(base, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Resume.On() || c.Resume.Max != 1 || c.Targets[0].Resume != "" {
		t.Fatalf("defaults: %+v, target %q", c.Resume, c.Targets[0].Resume)
	}
	if d := c.Describe(); !strings.Contains(d, "FAILOVER_RESUME=off  FAILOVER_RESUME_MAX=1\n") {
		t.Fatalf("-check:\n%s", d)
	}

	c, err = Load(append(base, "FAILOVER_RESUME=ON", "FAILOVER_RESUME_MAX=3", "FAILOVER_TARGET_0_RESUME=Prefill", "FAILOVER_TARGET_1_RESUME=continue"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Resume.On() || c.Resume.Max != 3 || c.Targets[0].Resume != "prefill" || c.Targets[1].Resume != "continue" {
		t.Fatalf("%+v, targets %q %q", c.Resume, c.Targets[0].Resume, c.Targets[1].Resume)
	}
	d := c.Describe()
	for _, want := range []string{"FAILOVER_RESUME=on  FAILOVER_RESUME_MAX=3\n", "weight=1 retries=1 resume=prefill\n", "resume=continue\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("-check lacks %q:\n%s", want, d)
		}
	}

	c, err = Load(append(base, "FAILOVER_RESUME=on"), true)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(); !strings.Contains(d, "no target is marked resumable: set FAILOVER_TARGET_<i>_RESUME") {
		t.Errorf("-check does not say that nothing can be resumed:\n%s", d)
	}
	c, err = Load(append(base, "FAILOVER_RESUME=on", "FAILOVER_RESUME_MAX=0", "FAILOVER_TARGET_1_RESUME=prefill"), true)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(); c.Resume.On() || !strings.Contains(d, "FAILOVER_RESUME_MAX=0: no stream is resumed") {
		t.Errorf("-check does not say that FAILOVER_RESUME_MAX=0 resumes nothing:\n%s", d)
	}

	c, err = Load(append(base, "FAILOVER_RESUME=on", "FAILOVER_TARGET_0_RESUME=Instruct", "FAILOVER_TARGET_1_RESUME=AUTO",
		"FAILOVER_RESUME_INSTRUCTION=Go on."), true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Targets[0].Resume != "instruct" || c.Targets[1].Resume != "auto" || c.Resume.EffectiveInstruction() != "Go on." {
		t.Fatalf("targets %q %q, instruction %q", c.Targets[0].Resume, c.Targets[1].Resume, c.Resume.EffectiveInstruction())
	}
	if d := c.Describe(); !strings.Contains(d, `FAILOVER_RESUME_INSTRUCTION="Go on."`) || !strings.Contains(d, "resume=auto\n") {
		t.Errorf("-check:\n%s", d)
	}
	if c, _ = Load(base, true); c.Resume.EffectiveInstruction() != DefaultResumeInstruction {
		t.Errorf("the default instruction: %q", c.Resume.EffectiveInstruction())
	}
	if _, err = Load(append(base, "FAILOVER_RESUME_INSTRUCTION="+strings.Repeat("x", 5000)), true); err == nil ||
		!strings.Contains(err.Error(), "FAILOVER_RESUME_INSTRUCTION: must be at most 4096 bytes, is 5000") {
		t.Errorf("a long instruction: %v", err)
	}

	_, err = Load(append(base, "FAILOVER_RESUME=yes", "FAILOVER_RESUME_MAX=-1", "FAILOVER_TARGET_1_RESUME=assistant", "FAILOVER_RESUME_MAXIMUM=2",
		"FAILOVER_RESUME_INSTRUCTION= \t"), true)
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{`FAILOVER_RESUME="yes": must be on or off`, `FAILOVER_RESUME_MAX="-1": must be >= 0`,
		`FAILOVER_RESUME_INSTRUCTION=" \t": must not be blank`,
		`FAILOVER_TARGET_1_RESUME="assistant": must be prefill, prefix, continue, instruct, auto, or empty`, "FAILOVER_RESUME_MAXIMUM: unknown variable (did you mean FAILOVER_RESUME_MAX?)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
}

// docs/streams.md quotes the default instruction as it is sent.
func TestDocsQuoteTheDefaultInstruction(t *testing.T) {
	b, err := os.ReadFile("../../../docs/streams.md")
	if err != nil {
		t.Fatal(err)
	}
	var quoted []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "> ") {
			quoted, in = append(quoted, strings.TrimPrefix(line, "> ")), true
		} else if in {
			break
		}
	}
	if got := strings.Join(quoted, " "); got != DefaultResumeInstruction {
		t.Errorf("docs/streams.md quotes %q, the default is %q", got, DefaultResumeInstruction)
	}
}
