//! liblb's C ABI (work in progress in this commit: see issue 3).
