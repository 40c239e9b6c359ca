//! Planning's own helpers for speed: the work of many files or tasks
//! split over the cores ([`par_chunks`]), and the time of each phase
//! ([`timing`]).

/// With `CASSIST_TIMINGS=1`, prints how long each planning phase took
/// (and `run` its own phases).
pub fn timing(phase: &str) {
    use std::sync::Mutex;
    use std::time::Instant;
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if std::env::var_os("CASSIST_TIMINGS").is_none() {
        return;
    }
    if let Ok(mut last) = LAST.lock() {
        let now = Instant::now();
        if let Some(prev) = *last {
            crate::errln!("timing: {phase:<12} {:>8.1} ms", (now - prev).as_secs_f64() * 1000.0);
        }
        *last = Some(now);
    }
}

/// Fewer items than this are worked on by the calling thread ([`par_chunks`]).
const INLINE_ITEMS: usize = 8;

/// `f` over `items` split in one chunk per core (at most 8), on scoped
/// threads; the results in the items' order. A few items go in one chunk
/// on the calling thread: starting a thread (its stack, the allocator's
/// first pages for it) costs more than the work of a few.
pub fn par_chunks<T: Sync, R: Send>(items: &[T], f: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    if items.is_empty() {
        return Vec::new();
    }
    if items.len() < INLINE_ITEMS {
        return vec![f(items)];
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let chunk = items.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items.chunks(chunk).map(|part| s.spawn(move || f(part))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_item_once_in_order() {
        let items: Vec<u32> = (0..1000).collect();
        let parts = par_chunks(&items, |part| part.to_vec());
        assert!(parts.len() > 1 || std::thread::available_parallelism().map_or(1, |n| n.get()) == 1);
        assert!(parts.len() <= 8, "at most 8 chunks: {}", parts.len());
        assert_eq!(parts.concat(), items, "every item once, in the items' order");
        assert!(par_chunks(&[] as &[u32], |p| p.len()).is_empty(), "no item, no call");
    }

    #[test]
    fn a_few_items_stay_on_the_calling_thread_in_one_chunk() {
        let me = std::thread::current().id();
        let items = [1, 2, 3, 4, 5, 6, 7];
        let ran = par_chunks(&items, |part| (std::thread::current().id(), part.len()));
        assert!(items.len() < INLINE_ITEMS);
        assert_eq!(ran, [(me, items.len())]);
    }
}
