// SPDX-License-Identifier: GPL-2.0

//! How much memory the host has, and how much it could spare now: what a
//! session's buffers are weighed against before they are allocated.
//!
//! C header: [`include/linux/mm.h`](srctree/include/linux/mm.h).

use kernel::page::PAGE_SIZE;

use crate::bindings;

/// Bytes the host could give without swapping, as `MemAvailable` in
/// `/proc/meminfo` counts them (`si_mem_available`).
pub fn available_bytes() -> u64 {
    // SAFETY: Reads counters; callable in any context.
    let pages = unsafe { bindings::si_mem_available() };
    // CAST: a page count is not negative; `usize` fits in `u64`.
    (pages.max(0) as u64).saturating_mul(PAGE_SIZE as u64)
}

/// Bytes of RAM the host has (`totalram_pages`).
pub fn total_bytes() -> u64 {
    // SAFETY: Reads a counter; callable in any context.
    let pages = unsafe { bindings::ferry_helper_totalram_pages() };
    // CAST: `c_ulong` and `usize` fit in `u64`.
    (pages as u64).saturating_mul(PAGE_SIZE as u64)
}
