package netio

import "time"

// deadlineSlack is how much earlier than asked a kept deadline may come (keepDeadline).
const deadlineSlack = time.Second

// keepDeadline reports whether the deadline set (zero: none) may stay when want is asked:
// both are the same, or want is no sooner than set and less than slack later. Moving a
// socket's deadline takes a lock and moves a runtime timer: a deadline that comes a little
// early, at the lengths these are, does not matter.
func keepDeadline(set, want time.Time, slack time.Duration) bool {
	if want.IsZero() || set.IsZero() {
		return want.IsZero() && set.IsZero()
	}
	return !want.Before(set) && want.Sub(set) < slack
}
