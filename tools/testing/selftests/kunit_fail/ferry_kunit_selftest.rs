// SPDX-License-Identifier: GPL-2.0

//! A KUnit suite that fails on purpose, for the test runner's self-test.

use kernel::prelude::*;

module! {
    type: SelfTest,
    name: "ferry_kunit_selftest",
    authors: ["The ferry authors"],
    description: "KUnit suite with a deliberate failure (test runner self-test)",
    license: "GPL",
}

struct SelfTest;

impl kernel::Module for SelfTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
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
