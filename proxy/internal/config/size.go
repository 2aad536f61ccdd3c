package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a byte count read from plain bytes ("131072") or with a KiB, MiB or GiB suffix
// ("128KiB", "32MiB"). 0 disables the limit it configures.
type Size int64

// UnmarshalText parses a size (for caarlos0/env).
func (s *Size) UnmarshalText(text []byte) error {
	v := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("not a size: use bytes or a KiB/MiB/GiB suffix, like 128KiB or 32MiB")
	}
	if n > (1<<62)/mult {
		return fmt.Errorf("size too large")
	}
	*s = Size(n * mult)
	return nil
}

// String renders the size the way it is best written.
func (s Size) String() string {
	switch {
	case s != 0 && s%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", s>>20)
	case s != 0 && s%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", s>>10)
	}
	return strconv.FormatInt(int64(s), 10)
}
