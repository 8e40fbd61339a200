// SPDX-License-Identifier: GPL-2.0

//! A KUnit suite that fails on purpose, and a planted memory leak, for the
//! test runner's self-tests: the runner must count the failure, and the debug
//! run's leak scan must find the leak.

use kernel::prelude::*;

module! {
    type: SelfTest,
    name: "ferry_kunit_selftest",
    authors: ["The ferry authors"],
    description: "KUnit suite with a deliberate failure and leak (test runner self-test)",
    license: "GPL",
}

struct SelfTest;

impl kernel::Module for SelfTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // Forgotten on purpose: nothing refers to it once this returns.
        KBox::leak(KBox::new([0x5au8; 64], GFP_KERNEL)?);
        Ok(SelfTest)
    }
}

#[kunit_tests(ferry_selftest_kunit)]
mod tests {
    #[test]
    fn passes() {
        assert_eq!(1 + 1, 2);
    }

    #[test]
    fn fails_on_purpose() {
        assert_eq!(1 + 1, 3);
    }
}
