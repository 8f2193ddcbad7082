//! Which cores a rail's workers run on (Linux; elsewhere nothing is pinned).
//!
//! Invariants:
//! - Only the calling thread is ever pinned; workers only to a CPU of the set the engine's
//!   creating thread may run on; a failed pin leaves the thread where it was (logged at debug).
//!   [`pin_current_thread`] and [`set_current_thread_cpus`] are public so a caller (the
//!   engine bench) can place its submitting thread beside the workers.
//! - Cores are handed out round-robin across every engine of the process, so two engines'
//!   workers start on different cores when there are enough.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The CPUs the calling thread may run on, in ascending order; empty when unknown.
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: pid 0 is the calling thread; `set` is a valid, writable cpu_set_t.
        if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
            return Vec::new();
        }
        let bits = 8 * size;
        // SAFETY: `cpu` is below the set's bit count.
        (0..bits).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// Pins the calling thread to `cpu`; false when the OS refused (or cannot pin).
pub fn pin_current_thread(cpu: usize) -> bool {
    set_current_thread_cpus(&[cpu])
}

/// Lets the calling thread run on `cpus` only (all of them: unpins a pinned thread); false
/// when the OS refused, a CPU is out of range or the set is empty.
pub fn set_current_thread_cpus(cpus: &[usize]) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as in `allowed_cpus`.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
        if cpus.is_empty() || cpus.iter().any(|&cpu| cpu >= bits) {
            return false;
        }
        for &cpu in cpus {
            // SAFETY: `cpu` is below the set's bit count (checked above).
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpus;
        false
    }
}

/// One core for each of `workers` workers, or `None` when they should float: fewer than two
/// allowed CPUs, or more workers than CPUs (pinned workers would then share cores while
/// others idle).
pub(crate) fn cores_for(workers: usize) -> Option<Vec<usize>> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let cpus = allowed_cpus();
    if cpus.len() < 2 || workers > cpus.len() {
        return None;
    }
    let first = NEXT.fetch_add(workers, Ordering::Relaxed);
    Some((0..workers).map(|i| cpus[(first + i) % cpus.len()]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_are_allowed_distinct_and_absent_when_workers_outnumber_cpus() {
        let cpus = allowed_cpus();
        if cpus.len() < 2 {
            assert_eq!(cores_for(1), None, "one CPU: nothing to dedicate");
            return;
        }
        let cores = cores_for(cpus.len()).expect("as many workers as CPUs get cores");
        assert!(cores.iter().all(|c| cpus.contains(c)), "{cores:?} not within {cpus:?}");
        let mut distinct = cores.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), cores.len(), "{cores:?} repeats a core");
        assert_eq!(cores_for(cpus.len() + 1), None);
    }

    #[test]
    fn a_pinned_thread_runs_only_on_its_core() {
        let cpus = allowed_cpus();
        let Some(&last) = cpus.last() else { return };
        std::thread::spawn(move || {
            assert!(pin_current_thread(last));
            assert_eq!(allowed_cpus(), vec![last]);
        })
        .join()
        .unwrap();
        // Pinning another thread left this one alone.
        assert_eq!(allowed_cpus(), cpus);
    }
}
