package main

import (
	"reflect"
	"testing"
	"time"
)

var testShape = scheduleShape{rounds: 5, consumers: 7, groups: 2, providers: 3, members: 3, sessionTimeout: 4 * time.Second}

func TestASeedReplaysItsSchedule(t *testing.T) {
	a, b := newSchedule(42, testShape), newSchedule(42, testShape)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 drew two schedules:\n%s\n%s", a, b)
	}
	if c := newSchedule(43, testShape); reflect.DeepEqual(a.Rounds, c.Rounds) {
		t.Errorf("seeds 42 and 43 drew the same schedule: %s", a)
	}
}

func TestSchedulesDrawEveryFaultAndOverlapThem(t *testing.T) {
	seen := map[string]bool{}
	overlapped := 0
	for seed := range int64(50) {
		s := newSchedule(seed, testShape)
		if len(s.Rounds) != testShape.rounds {
			t.Fatalf("seed %d: %d rounds, want %d", seed, len(s.Rounds), testShape.rounds)
		}
		for _, rd := range s.Rounds {
			if len(rd.Steps) < 1 || len(rd.Steps) > 3 {
				t.Errorf("seed %d: a round of %d faults: %s", seed, len(rd.Steps), s)
			}
			if len(rd.Steps) > 1 {
				overlapped++
			}
			zk, groups := 0, map[int]int{}
			for _, st := range rd.Steps {
				seen[st.Kind] = true
				switch st.Kind {
				case kLeader, kMember, kEnsemble:
					zk++
				case kSigterm, kKill, kHealth, kDrain, kOverlap, kMinUp, kDrainExpire:
					groups[st.Group]++
				case kBlackholeLong, kResetLong:
					if st.For <= testShape.sessionTimeout {
						t.Errorf("seed %d: %s holds %v, not longer than the session timeout", seed, st, st.For)
					}
				case kBlackholeShort, kResetShort:
					if st.For >= testShape.sessionTimeout {
						t.Errorf("seed %d: %s holds %v, not shorter than the session timeout", seed, st, st.For)
					}
				}
			}
			if zk > 1 {
				t.Errorf("seed %d: %d ensemble faults in one round: %s", seed, zk, s)
			}
			for g, n := range groups {
				if n > 1 {
					t.Errorf("seed %d: %d faults on group %d's providers in one round: %s", seed, n, g, s)
				}
			}
		}
	}
	for _, k := range allKinds {
		if !seen[k] {
			t.Errorf("50 seeds never drew %s", k)
		}
	}
	if overlapped == 0 {
		t.Error("no round of 50 seeds has overlapping faults")
	}
}
