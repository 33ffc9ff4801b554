package holder

import (
	"strconv"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// SlotSets are the run and standby slot sets cfg describes: flock files in
// lock_dir, or, with lock_backend redis, the fleet's leases through rdb
// (nil: the lock dir's files). sb is nil when standby_slots is 0. A process
// builds them once and shares them: baton run takes its slot from them and
// its holder reads them (history, scaler, metrics file); status, job,
// metrics and web read them. With leases, rdb is the one lease client of
// the process (baton run: its own small one, apart from the job loop's, so
// that renewals never queue behind job traffic).
func SlotSets(cfg *config.Config, rdb redis.UniversalClient) (run, sb lock.Set, err error) {
	if cfg.LockBackend == "redis" && rdb != nil {
		opt := lock.LeaseOptions{Host: cfg.Host, TTL: cfg.LeaseTTL.D(), Renew: cfg.LeaseRenew.D(), Agree: FleetSettings(cfg)}
		lr, err := lock.NewLeaseSet(rdb, cfg.Queue, lock.RoleRun, cfg.Slots, opt)
		if err != nil || cfg.StandbySlots == 0 {
			return lr, nil, err
		}
		ls, err := lock.NewLeaseSet(rdb, cfg.Queue, lock.RoleStandby, cfg.StandbySlots, opt)
		if err != nil {
			return nil, nil, err
		}
		lr.HandOverTo(ls, cfg.MinSlots) // a retiring holder of a kept slot hands its lease to the oldest standby
		return lr, ls, nil
	}
	// Holders name the Redis database they work in: another deployment
	// sharing this lock dir and queue name is told apart (Foreign).
	target := cfg.RedisTarget()
	fr, err := lock.NewFileSet(cfg.LockDir, cfg.Queue, lock.RoleRun, cfg.Slots)
	if err != nil || cfg.StandbySlots == 0 {
		return withTarget(fr, target), nil, err
	}
	fs, err := lock.NewFileSet(cfg.LockDir, cfg.Queue, lock.RoleStandby, cfg.StandbySlots)
	return withTarget(fr, target), withTarget(fs, target), err
}

// withTarget is s naming target, nil for nil (a nil *FileSet must not
// become a non-nil Set).
func withTarget(s *lock.FileSet, target string) lock.Set {
	if s == nil {
		return nil
	}
	return s.WithTarget(target)
}

// FleetSettings are the settings every host of a fleet must share on one
// queue (lock.LeaseOptions.Agree), by their config names.
func FleetSettings(cfg *config.Config) []lock.Setting {
	return []lock.Setting{
		{Name: "slots", Value: strconv.Itoa(cfg.Slots)},
		{Name: "standby_slots", Value: strconv.Itoa(cfg.StandbySlots)},
		{Name: "lease_ttl", Value: cfg.LeaseTTL.D().String()},
		{Name: "lease_renew", Value: cfg.LeaseRenew.D().String()},
	}
}
