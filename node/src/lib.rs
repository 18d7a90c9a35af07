//! liblb for Node.js (work in progress in this commit: see issue 5).
