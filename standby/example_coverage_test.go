package standby_test

import (
	"fmt"
	"time"

	"github.com/baton-run/baton/standby"
)

func ExampleParseSchedule() {
	for _, spec := range []string{"* * * * *", "*/7 * * * *", "0 9-17 * * 1-5"} {
		s, err := standby.ParseSchedule(spec)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-16s C = %-5s up to %d firing(s) within C\n", spec, standby.FormatDuration(s.Gap()), s.PeakLines())
	}
	// Output:
	// * * * * *        C = 1m    up to 1 firing(s) within C
	// */7 * * * *      C = 7m    up to 2 firing(s) within C
	// 0 9-17 * * 1-5   C = 64h   up to 27 firing(s) within C
}

func ExampleCheck() {
	s, err := standby.ParseSchedule("* * * * *")
	if err != nil {
		panic(err)
	}
	q := standby.Quantities{
		C: s.Gap(), Lines: s.MinLines(), PeakLines: s.PeakLines(), Spawn: 1,
		Slots: 4, StandbySlots: 4,
		Lifetime: 5 * time.Minute, Jitter: time.Minute, StandbyWait: 12 * time.Minute,
		Poll: 500 * time.Millisecond, Grace: 30 * time.Second, JobTimeout: time.Minute, Visibility: 10 * time.Minute,
	}
	for _, r := range standby.Check(q) {
		if r.Status != standby.Pass {
			fmt.Printf("%s %s: %s (%s)\n  fix: %s\n", r.Status, r.Formula, r.Values, r.Margin, r.Fix)
		}
	}
	// Output:
	// FAIL S ≥ 2·H: 12m ≥ 2·6m30s (-1m)
	//   fix: raise standby_wait to at least 13m, or lower jitter to 30s
}
