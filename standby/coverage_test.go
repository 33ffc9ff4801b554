package standby

import (
	"strings"
	"testing"
	"time"
)

// passing is a config that passes every relation: the default config with a
// second standby slot (one is enough; two make the spare visible in tests).
func passing() Quantities {
	return Quantities{
		C: time.Minute, Spawn: 1, Lines: 1, PeakLines: 1,
		Slots: 1, StandbySlots: 2,
		Lifetime: 5 * time.Minute, Jitter: time.Minute, StandbyWait: 15 * time.Minute,
		Poll: 500 * time.Millisecond, Grace: 30 * time.Second, JobTimeout: time.Minute, Visibility: 10 * time.Minute,
	}
}

func relation(tb testing.TB, q Quantities, name string) Relation {
	tb.Helper()
	for _, r := range Check(q) {
		if r.Name == name {
			return r
		}
	}
	tb.Fatalf("no relation %q", name)
	return Relation{}
}

func TestCheckPassing(t *testing.T) {
	rs := Check(passing())
	if len(rs) != 9 {
		t.Fatalf("%d relations, want 9", len(rs))
	}
	for _, r := range rs {
		if r.Status != Pass || r.Fix != "" || r.Formula == "" || r.Values == "" || r.Why == "" || r.Margin == "" {
			t.Errorf("%+v", r)
		}
	}
	if Failed(rs) {
		t.Fatal("Failed on a passing config")
	}
}

// TestCheckRelations breaks one relation at a time and checks its verdict,
// values and fix message word for word.
func TestCheckRelations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(q *Quantities)
		relation string
		status   Status
		values   string
		margin   string
		fix      string
	}{
		{
			"standby gives up before the lifetime ends",
			func(q *Quantities) { q.Jitter, q.StandbyWait = 70*time.Second, 5*time.Minute+40*time.Second },
			"standby-outwaits-lifetime", Fail, "5m40s ≥ 6m10s", "-30s",
			"raise standby_wait to at least 6m10s, or lower jitter to 40s",
		},
		{
			"standby gives up before the lifetime ends, no jitter to lower",
			func(q *Quantities) { q.Jitter, q.StandbyWait = 0, 4*time.Minute },
			"standby-outwaits-lifetime", Fail, "4m ≥ 5m", "-1m",
			"raise standby_wait to at least 5m",
		},
		{
			"standby gives up before the hard deadline",
			func(q *Quantities) { q.StandbyWait = 6*time.Minute + 20*time.Second },
			"standby-outwaits-deadline", Fail, "6m20s > 6m + 30s + 0s", "-10s",
			"raise standby_wait to at least 6m31s, or lower shutdown_grace to 19s",
		},
		{
			"hard deadline exactly at S, with run's margin",
			func(q *Quantities) { q.StandbyWait, q.HardMargin = 6*time.Minute+32*time.Second, 2*time.Second },
			"standby-outwaits-deadline", Fail, "6m32s > 6m + 30s + 2s", "+0s",
			"raise standby_wait to at least 6m33s, or lower shutdown_grace to 29s",
		},
		{
			"standby cannot outwait a second holder",
			func(q *Quantities) { q.StandbyWait = 12 * time.Minute },
			"standby-survives-lost-handover", Fail, "12m ≥ 2·6m30s", "-1m",
			"raise standby_wait to at least 13m, or lower jitter to 30s",
		},
		{
			"hourly cron, 5-minute lifetime",
			func(q *Quantities) { q.C = time.Hour },
			"cron-beats-lifetime", Fail, "5m > 1h + 1s", "-55m1s",
			"raise lifetime to at least 1h0m2s, or fire more often: schedule '*/4 * * * *'",
		},
		{
			"lifetime too short for any schedule",
			func(q *Quantities) { q.Lifetime = 50 * time.Second },
			"cron-beats-lifetime", Fail, "50s > 1m + 1s", "-11s",
			"raise lifetime to at least 1m2s",
		},
		{
			"4 slots, spawn 1, lifetime 3 minutes",
			func(q *Quantities) { q.Slots, q.StandbySlots, q.Lifetime, q.Jitter = 4, 5, 3*time.Minute, 0 },
			"replenishment", Fail, "1·2 = 2 ≥ 4", "-2 candidates",
			"raise spawn to 2, or raise lifetime to at least 4m1s",
		},
		{
			"8 slots every 5 minutes",
			func(q *Quantities) {
				q.C, q.Slots, q.StandbySlots, q.Lifetime, q.StandbyWait = 5*time.Minute, 8, 9, 20*time.Minute, time.Hour
			},
			"replenishment", Fail, "1·3 = 3 ≥ 8", "-5 candidates",
			"raise spawn to 3, or raise lifetime to at least 40m1s, or fire more often: schedule '*/2 * * * *'",
		},
		{
			"two lines add up",
			func(q *Quantities) { q.Lines, q.Slots, q.StandbySlots, q.Lifetime = 2, 12, 14, 3*time.Minute },
			"replenishment", Fail, "2·2 = 4 ≥ 12", "-8 candidates",
			"raise spawn to 3, or raise lifetime to at least 6m1s",
		},
		{
			"fewer standby slots than run slots",
			func(q *Quantities) { q.Slots, q.StandbySlots = 4, 2 },
			"standby-slots", Fail, "2 ≥ 4", "-2 slots",
			"raise standby_slots to 4",
		},
		{
			"no standby slots",
			func(q *Quantities) { q.StandbySlots = 0 },
			"standby-slots", Fail, "0 ≥ 1", "-1 slots",
			"raise standby_slots to 1",
		},
		{
			"4 slots, 4 standby slots, spawn 2 (crontab.example): standbys are promoted oldest first",
			func(q *Quantities) { q.Slots, q.StandbySlots, q.Spawn = 4, 4, 2 },
			"standby-slots", Pass, "4 ≥ 4", "+0 slots", "",
		},
		{
			"the default: one slot, one standby slot",
			func(q *Quantities) { q.StandbySlots = 1 },
			"standby-slots", Pass, "1 ≥ 1", "+0 slots", "",
		},
		{
			"slow poll",
			func(q *Quantities) { q.Poll = 5 * time.Second },
			"poll-interval", Warn, "5.5s ≤ 3s", "-2.5s",
			"lower poll_interval to 2.727s",
		},
		{
			"claiming off",
			func(q *Quantities) { q.Visibility = 0 },
			"visibility-timeout", Warn, "0s > 1m + 30s", "off",
			"set visibility_timeout to at least 1m31s",
		},
		{
			"visibility shorter than a job",
			func(q *Quantities) { q.Visibility = time.Minute },
			"visibility-timeout", Fail, "1m > 1m + 30s", "-30s",
			"raise visibility_timeout to at least 1m31s, or lower job_timeout to 29s",
		},
		{
			"no job timeout",
			func(q *Quantities) { q.JobTimeout, q.Visibility = 0, 20*time.Second },
			"visibility-timeout", Fail, "20s > 0s + 30s", "-10s",
			"raise visibility_timeout to at least 31s",
		},
		{
			"max_jobs can end a holder early",
			func(q *Quantities) { q.MaxJobs = 1000 },
			"max-jobs", Warn, "1000 = 0", "-",
			"set max_jobs = 0, or keep it high enough that 1000 jobs take longer than 5m",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := passing()
			tc.edit(&q)
			r := relation(t, q, tc.relation)
			if r.Status != tc.status || r.Values != tc.values || r.Margin != tc.margin || r.Fix != tc.fix {
				t.Fatalf("got\n  %s %q margin %q fix %q\nwant\n  %s %q margin %q fix %q",
					r.Status, r.Values, r.Margin, r.Fix, tc.status, tc.values, tc.margin, tc.fix)
			}
			if Failed(Check(q)) != (tc.status == Fail) {
				t.Fatalf("Failed = %v", !(tc.status == Fail))
			}
		})
	}
}

// TestPollFixRaisesLifetime: when no poll of 10ms or more is short enough,
// the fix is a longer lifetime (other relations fail too at such lifetimes).
func TestPollFixRaisesLifetime(t *testing.T) {
	q := passing()
	q.Lifetime, q.Jitter, q.Poll = time.Second, 0, 10*time.Millisecond
	r := relation(t, q, "poll-interval")
	if r.Status != Warn || r.Values != "11ms ≤ 10ms" || r.Fix != "raise lifetime to at least 2s" {
		t.Fatalf("%+v", r)
	}
}

func TestStandbySlotsSaysWhichSlots(t *testing.T) {
	q := passing()
	q.Slots, q.StandbySlots = 6, 2
	r := relation(t, q, "standby-slots")
	for _, want := range []string{"when 3 or more holders retire", "the 2 standbys take 2 of the free run slots", "up to 1m1s", "4 run slots empty"} {
		if !strings.Contains(r.Why, want) {
			t.Errorf("why %q lacks %q", r.Why, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 500 * time.Millisecond: "500ms", 10 * time.Second: "10s", 6 * time.Minute: "6m",
		6*time.Minute + 10*time.Second: "6m10s", time.Hour: "1h", time.Hour + time.Minute: "1h1m",
		time.Hour + 2*time.Second: "1h0m2s", -time.Minute: "-1m", 64 * time.Hour: "64h",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if v, err := time.ParseDuration(FormatDuration(d)); err != nil || v != d {
			t.Errorf("%q does not parse back to %v: %v %v", FormatDuration(d), d, v, err)
		}
	}
}

func TestStatusText(t *testing.T) {
	for _, s := range []Status{Pass, Warn, Fail} {
		b, _ := s.MarshalText()
		var got Status
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Errorf("%s: round trip gave %v, %v", s, got, err)
		}
	}
	var s Status
	if err := s.UnmarshalText([]byte("OK")); err == nil {
		t.Error("OK accepted")
	}
}

// fleet is passing() in fleet mode on 3 hosts, with the default lease
// timings (15s, renew deadline 10s, renew 2s).
func fleet() Quantities {
	q := passing()
	q.Hosts, q.LeaseTTL, q.RenewDeadline, q.LeaseRenew = 3, 15*time.Second, 10*time.Second, 2*time.Second
	return q
}

// TestCheckFleetPassing: fleet mode adds the lease order, the lease a
// standby must outwait and the loss of a host, and counts the candidates of
// every host; max_per_host adds the cap.
func TestCheckFleetPassing(t *testing.T) {
	q := fleet()
	rs := Check(q)
	if len(rs) != 12 || Failed(rs) {
		t.Fatalf("%d relations, failed %v: %+v", len(rs), Failed(rs), rs)
	}
	if r := relation(t, q, "replenishment"); r.Values != "3·4 = 12 ≥ 1" {
		t.Errorf("replenishment counts every host's candidates: %q", r.Values)
	}
	q.MaxPerHost = 1
	if r := relation(t, q, "host-cap"); r.Status != Pass || r.Values != "2·1 = 2 ≥ 1" {
		t.Errorf("%+v", r)
	}
	if n := len(Check(passing())); n != 9 {
		t.Errorf("flock mode: %d relations, want 9 (no fleet relations)", n)
	}
}

// TestCheckFleetRelations breaks one fleet relation at a time and checks
// its verdict, values, margin and fix word for word.
func TestCheckFleetRelations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(q *Quantities)
		relation string
		status   Status
		values   string
		margin   string
		fix      string
	}{
		{
			"kubernetes timings",
			func(q *Quantities) {},
			"lease-order", Pass, "15s > 10s > 3·2s", "+4s", "",
		},
		{
			"two renewals fit in the deadline",
			func(q *Quantities) { q.LeaseRenew = 4 * time.Second },
			"lease-order", Warn, "15s > 10s > 3·4s", "-2s", "lower lease_renew to 3.333s",
		},
		{
			"renew interval past the deadline",
			func(q *Quantities) { q.LeaseRenew = 12 * time.Second },
			"lease-order", Fail, "15s > 10s > 3·12s", "-26s", "lower lease_renew to 3.333s",
		},
		{
			"lease lingers past the standby wait",
			func(q *Quantities) {
				q.Lifetime, q.Jitter, q.Grace, q.StandbyWait = 10*time.Second, 0, time.Second, 24*time.Second
			},
			"standby-outwaits-lease", Fail, "24s > 11s + 15s", "-2s", "raise standby_wait to at least 27s, or lower lease_ttl to 12s",
		},
		{
			"the lease at the limit, with run's hard margin",
			func(q *Quantities) {
				q.Lifetime, q.Jitter, q.Grace, q.HardMargin, q.StandbyWait = 10*time.Second, 0, time.Second, 2*time.Second, 28*time.Second
			},
			"standby-outwaits-lease", Fail, "28s > 13s + 15s", "+0s", "raise standby_wait to at least 29s, or lower lease_ttl to 14s",
		},
		{
			"a lease_ttl short enough would break the lease order",
			func(q *Quantities) {
				q.Lifetime, q.Jitter, q.Grace, q.StandbyWait = 10*time.Second, 0, time.Second, 20*time.Second
			},
			"standby-outwaits-lease", Fail, "20s > 11s + 15s", "-6s", "raise standby_wait to at least 27s",
		},
		{
			"one host is all there is",
			func(q *Quantities) { q.Hosts = 1 },
			"host-loss", Warn, "1·0·4 = 0 ≥ 1", "-1 candidates", "run the crontab entry on a second host",
		},
		{
			"two hosts, one left cannot keep six slots",
			func(q *Quantities) { q.Hosts, q.Slots, q.StandbySlots = 2, 6, 6 },
			"host-loss", Fail, "1·1·4 = 4 ≥ 6", "-2 candidates", "raise spawn to 2, or run the entry on 3 hosts, or raise lifetime to at least 6m1s",
		},
		{
			"three hosts, spawn 2, two lines",
			func(q *Quantities) { q.Spawn, q.Lines, q.Slots, q.StandbySlots = 2, 2, 16, 16 },
			"host-loss", Pass, "4·2·4 = 32 ≥ 16", "+16 candidates", "",
		},
		{
			"no room on the hosts left",
			func(q *Quantities) { q.Slots, q.StandbySlots, q.MaxPerHost = 4, 4, 1 },
			"host-cap", Fail, "2·1 = 2 ≥ 4", "-2 slots", "raise max_per_host to 2",
		},
		{
			"no room for the standbys",
			func(q *Quantities) { q.Slots, q.StandbySlots, q.MaxPerHost = 4, 4, 2 },
			"host-room", Fail, "3·2 = 6 ≥ 8", "-2 slots", "raise max_per_host to 3, or run the entry on 4 hosts",
		},
		{
			"room for the standbys needed, not for every standby slot",
			func(q *Quantities) { q.Slots, q.StandbySlots, q.MaxPerHost = 2, 8, 2 },
			"host-room", Pass, "3·2 = 6 ≥ 4", "+2 slots", "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := fleet()
			tc.edit(&q)
			r := relation(t, q, tc.relation)
			if r.Status != tc.status || r.Values != tc.values || r.Margin != tc.margin || r.Fix != tc.fix {
				t.Fatalf("got %s %q margin %q fix %q\nwant %s %q margin %q fix %q", r.Status, r.Values, r.Margin, r.Fix,
					tc.status, tc.values, tc.margin, tc.fix)
			}
		})
	}
}
