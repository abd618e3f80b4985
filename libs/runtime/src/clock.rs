//! The time decisions are made with. Decisions compare "now" with times recorded in the store
//! (when an attempt was sent, when a spend was recorded): a step of the system clock while a
//! process runs (NTP correcting a wrong clock, an operator's `date -s`) would
//! move every one of them at once. A step forward would make every waiting fee bump due
//! together and push recorded spends out of a policy's rolling window early; a step back
//! would stall every resend until the clock caught up.
//!
//! So a process reads the wall clock once, at start, and from then on counts forward with the
//! monotonic clock, which no step moves. A step of the system clock takes effect at the next
//! start. Times recorded by other replicas still carry their hosts' clocks: keep hosts in sync
//! with NTP (skew, unlike a step, is small). Two limits: the monotonic clock does not count
//! time a host spends suspended, so after a suspend this clock runs behind until the next
//! start (decisions then come late, never early); and a process started on a wrong clock keeps
//! it until restarted.

use std::time::{Instant, SystemTime};

/// Wall time that moves only forward, at the monotonic clock's pace, from the wall clock read
/// at creation. Cheap to copy; every copy reads the same time.
#[derive(Debug, Clone, Copy)]
pub struct SteadyClock {
    wall_at_start: SystemTime,
    started: Instant,
}

impl SteadyClock {
    /// Anchored to the system clock now.
    pub fn start() -> Self {
        Self::anchored(SystemTime::now(), Instant::now())
    }

    /// Anchored at `wall` as of `started`.
    pub fn anchored(wall: SystemTime, started: Instant) -> Self {
        Self {
            wall_at_start: wall,
            started,
        }
    }

    /// Now, as this process counts it.
    pub fn now(&self) -> SystemTime {
        self.at(Instant::now())
    }

    /// The wall time of monotonic instant `instant`.
    pub fn at(&self, instant: Instant) -> SystemTime {
        self.wall_at_start + instant.saturating_duration_since(self.started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counts_from_its_anchor_at_the_monotonic_pace() {
        let started = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let clock = SteadyClock::anchored(wall, started);
        assert_eq!(clock.at(started), wall);
        assert_eq!(
            clock.at(started + Duration::from_secs(90)),
            wall + Duration::from_secs(90)
        );
        // Never before its anchor.
        assert_eq!(clock.at(started - Duration::from_millis(1)), wall);
    }

    #[test]
    fn a_step_of_the_system_clock_does_not_move_it() {
        // Whatever the system clock says now, a clock anchored an instant ago reads within a
        // few milliseconds of its anchor: it does not consult the system clock again.
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(42);
        let clock = SteadyClock::anchored(wall, Instant::now());
        let read = clock.now().duration_since(wall).unwrap();
        assert!(read < Duration::from_secs(5), "{read:?}");
    }
}
