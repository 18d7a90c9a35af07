//! liblb for Python (work in progress in this commit: see issue 4).
