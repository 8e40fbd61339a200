// SPDX-License-Identifier: GPL-2.0

//! What ferry_blk asks of the kernel besides the block layer: whether the
//! caller may open block devices, and references to its own module (an
//! export or a mapping keeps it loaded).

use crate::bindings;

/// Whether the current task has `CAP_SYS_ADMIN` (it may open a block device
/// by path to export it).
pub fn capable_sys_admin() -> bool {
    // SAFETY: No preconditions; called in the task's own context.
    unsafe { bindings::ferry_blk_capable_sys_admin() }
}

/// Takes a reference to this module: it cannot be unloaded until
/// [`module_put`] gives it back. `false` if it is being unloaded already.
#[must_use]
pub fn module_get() -> bool {
    // SAFETY: The module is live: this code runs in it.
    unsafe { bindings::ferry_blk_module_get() }
}

/// Gives back a reference [`module_get`] took.
pub fn module_put() {
    // SAFETY: Pairs with a `module_get` (the callers' contract with
    // themselves: one put per export or mapping removed); the module stays
    // until this call returns, as its caller runs in it.
    unsafe { bindings::ferry_blk_module_put() };
}
