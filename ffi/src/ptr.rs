//! Every raw pointer from C goes through these helpers, which check for NULL (and absurd
//! lengths) before anything is dereferenced, and turn the opaque handle types into their Rust
//! types in one place (the rustls-ffi `Castable` pattern).

use crate::lb_result;
use core::ffi::c_void;
use core::mem::size_of;

/// Ties an opaque C handle type to the Rust value it stands for. A handle points at that value
/// and is only ever cast back to the same type; how it was made says how it is freed:
/// [`Boxed`] handles by `Box` (the caller is the only owner), [`Shared`] ones by `Arc` (the
/// caller's reference, plus those other liblb objects took with [`share`]).
pub(crate) trait Castable {
    /// The Rust type behind the handle.
    type Rust;
}

/// A handle the caller owns alone: [`to_handle`], [`free_handle`], [`take_handle`], [`try_mut`].
pub(crate) trait Boxed: Castable {}

/// A handle liblb objects may hold too (a balancer its requests, a budget the balancers it
/// limits): [`to_shared_handle`], [`free_shared_handle`], [`share`]. Never mutably borrowed.
pub(crate) trait Shared: Castable {}

/// Moves `value` to the heap and hands C an opaque pointer to it; [`free_handle`] takes it back.
pub(crate) fn to_handle<C: Boxed>(value: C::Rust) -> *mut C {
    Box::into_raw(Box::new(value)).cast()
}

/// Moves `value` into an `Arc` and hands C an opaque pointer to it (the caller's reference);
/// [`free_shared_handle`] drops that reference.
pub(crate) fn to_shared_handle<C: Shared>(value: C::Rust) -> *mut C {
    std::sync::Arc::into_raw(std::sync::Arc::new(value))
        .cast_mut()
        .cast()
}

/// Another reference to the value behind a shared handle, for a liblb object to keep.
///
/// # Safety
/// `handle` is NULL or came from [`to_shared_handle`] for the same `C`, and the caller's
/// reference has not been freed.
pub(crate) unsafe fn share<C: Shared>(
    handle: *const C,
) -> Result<std::sync::Arc<C::Rust>, lb_result> {
    if handle.is_null() {
        return Err(lb_result::NullParameter);
    }
    let value = handle.cast::<C::Rust>();
    // SAFETY: by the caller's contract `value` came from `Arc::into_raw` of an `Arc<C::Rust>`
    // whose caller's reference is alive, so the count is at least 1; taking one more and
    // turning it into an `Arc` leaves the caller's reference untouched.
    unsafe {
        std::sync::Arc::increment_strong_count(value);
        Ok(std::sync::Arc::from_raw(value))
    }
}

/// Drops the caller's reference to a shared handle's value (freed once no liblb object holds
/// it). NULL is fine and does nothing.
///
/// # Safety
/// `handle` is NULL or came from [`to_shared_handle`] for the same `C`, and the caller's
/// reference has not been freed; the caller does not use the handle again.
pub(crate) unsafe fn free_shared_handle<C: Shared>(handle: *mut C) {
    if !handle.is_null() {
        // SAFETY: the caller's reference, made by `Arc::into_raw` in `to_shared_handle`, given
        // back once.
        drop(unsafe { std::sync::Arc::from_raw(handle.cast_const().cast::<C::Rust>()) });
    }
}

/// Borrows the Rust value behind a handle.
///
/// # Safety
/// `handle` is NULL or came from [`to_handle`] or [`to_shared_handle`] for the same `C`, and
/// has not been freed.
pub(crate) unsafe fn try_ref<'a, C: Castable>(handle: *const C) -> Result<&'a C::Rust, lb_result> {
    // SAFETY: by the caller's contract a non-NULL handle points to a live `C::Rust` made by
    // `to_handle` or `to_shared_handle` (both point at the value itself); `as_ref` turns NULL
    // into `None`.
    unsafe { handle.cast::<C::Rust>().as_ref() }.ok_or(lb_result::NullParameter)
}

/// Borrows the Rust value behind an optional handle: NULL is `None` (e.g. "default options").
///
/// # Safety
/// As [`try_ref`].
pub(crate) unsafe fn opt_ref<'a, C: Castable>(handle: *const C) -> Option<&'a C::Rust> {
    // SAFETY: forwarded contract.
    unsafe { try_ref(handle) }.ok()
}

/// Mutably borrows the Rust value behind a handle.
///
/// # Safety
/// As [`try_ref`], and no other reference to the value exists during `'a`.
pub(crate) unsafe fn try_mut<'a, C: Boxed>(handle: *mut C) -> Result<&'a mut C::Rust, lb_result> {
    // SAFETY: as `try_ref`; exclusivity is the caller's contract (documented in lb.h).
    unsafe { handle.cast::<C::Rust>().as_mut() }.ok_or(lb_result::NullParameter)
}

/// Takes back the value behind a non-NULL handle (the handle is gone afterwards).
///
/// # Safety
/// `handle` is non-NULL, came from [`to_handle`] for the same `C`, and has not been freed; the
/// caller does not use it again.
pub(crate) unsafe fn take_handle<C: Boxed>(handle: *mut C) -> C::Rust {
    // SAFETY: the caller's contract: a live `Box<C::Rust>` turned into a raw pointer by
    // `to_handle`, not used again.
    *unsafe { Box::from_raw(handle.cast::<C::Rust>()) }
}

/// Drops the value behind a handle. NULL is fine and does nothing.
///
/// # Safety
/// `handle` is NULL or came from [`to_handle`] for the same `C` and has not been freed.
pub(crate) unsafe fn free_handle<C: Boxed>(handle: *mut C) {
    if !handle.is_null() {
        // SAFETY: a non-NULL handle is a live `Box<C::Rust>` turned into a raw pointer by
        // `to_handle`; the caller promises not to use it again.
        drop(unsafe { Box::from_raw(handle.cast::<C::Rust>()) });
    }
}

/// Checks that `len` elements of `T` fit in the address space: `slice::from_raw_parts` needs
/// the total size to be at most `isize::MAX`, and a bigger length can only be a bug (e.g. -1).
fn check_len<T>(len: usize) -> Result<(), lb_result> {
    match len.checked_mul(size_of::<T>().max(1)) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(lb_result::InvalidLength),
    }
}

/// An input array of `len` elements. Length 0 is the empty array whatever the pointer (NULL,
/// dangling or misaligned: it is never touched); NULL with a non-zero length is
/// `LB_RESULT_NULL_PARAMETER`.
///
/// # Safety
/// With `len > 0`, a non-NULL `ptr` points to `len` initialised `T`s that stay unchanged
/// during `'a`.
pub(crate) unsafe fn try_slice<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], lb_result> {
    check_len::<T>(len)?;
    if len == 0 {
        // `from_raw_parts` needs an aligned non-NULL pointer even for length 0, and C owes us
        // nothing for an empty array: do not look at the pointer at all.
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(lb_result::NullParameter);
    }
    // SAFETY: `ptr` is non-NULL and, by the caller's contract, valid (so also aligned) for
    // `len > 0` reads of `T`; `check_len` proved the size fits in `isize`.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// Input bytes given as `const void *` or `const char *` plus a length (see [`try_slice`]).
///
/// # Safety
/// As [`try_slice`] with `T = u8`.
pub(crate) unsafe fn try_bytes<'a, P>(ptr: *const P, len: usize) -> Result<&'a [u8], lb_result> {
    // SAFETY: forwarded contract; bytes have no alignment requirement.
    unsafe { try_slice(ptr.cast::<u8>(), len) }
}

/// An optional key: NULL with length 0 means "no key" (where [`try_bytes`] would read the empty
/// string); a non-NULL pointer with length 0 is the empty key; anything else is [`try_bytes`].
///
/// # Safety
/// As [`try_bytes`].
pub(crate) unsafe fn try_key<'a>(
    ptr: *const c_void,
    len: usize,
) -> Result<Option<&'a [u8]>, lb_result> {
    if ptr.is_null() && len == 0 {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    unsafe { try_bytes(ptr, len) }.map(Some)
}

/// A UTF-8 string given as pointer plus length (ids, names, option values).
///
/// # Safety
/// As [`try_bytes`].
pub(crate) unsafe fn try_str<'a, P>(ptr: *const P, len: usize) -> Result<&'a str, lb_result> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { try_bytes(ptr, len) }?;
    liblb_core::id_from_utf8(bytes).map_err(lb_result::from)
}

/// An output array of `len` elements the caller lends us. Length 0 is an empty array whatever
/// the pointer (it is dropped unlooked-at, so a dangling or misaligned one is fine); NULL with a
/// non-zero length is `LB_RESULT_NULL_PARAMETER`. Elements are written one by one through the
/// raw pointer and never read, so C may hand over uninitialised memory.
///
/// # Safety
/// With `len > 0`, a non-NULL `ptr` is valid for `len` writes of `T` during `'a` and nothing
/// else accesses them.
pub(crate) unsafe fn try_out_slice<'a, T>(
    ptr: *mut T,
    len: usize,
) -> Result<OutSlice<'a, T>, lb_result> {
    check_len::<T>(len)?;
    if ptr.is_null() && len != 0 {
        return Err(lb_result::NullParameter);
    }
    Ok(OutSlice {
        ptr: if len == 0 { core::ptr::null_mut() } else { ptr },
        len,
        _borrow: core::marker::PhantomData,
    })
}

/// A checked output array (see [`try_out_slice`]).
pub(crate) struct OutSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: core::marker::PhantomData<&'a mut [T]>,
}

impl<T> OutSlice<'_, T> {
    /// Number of elements the caller provided.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes element `index`.
    ///
    /// # Panics
    /// If `index >= len()` (a bug in liblb; the panic boundary reports it).
    pub(crate) fn write(&mut self, index: usize, value: T) {
        assert!(
            index < self.len,
            "output index {index} out of bounds {}",
            self.len
        );
        // SAFETY: `index < len`, and `try_out_slice`'s contract makes `ptr` valid for `len`
        // writes (with `len == 0`, `ptr` is NULL and this line is never reached).
        // `write` neither reads nor drops the old contents.
        unsafe { self.ptr.add(index).write(value) }
    }

    /// The address of element `index` (for ids pointing into the caller's own buffer).
    pub(crate) fn address_of(&self, index: usize) -> *mut T {
        assert!(
            index <= self.len,
            "output offset {index} out of bounds {}",
            self.len
        );
        // SAFETY: `index <= len` stays within (or one past) the caller's allocation; when
        // `len` is 0, `ptr` is NULL, `index` is 0, and `add(0)` is allowed on any pointer.
        unsafe { self.ptr.add(index) }
    }
}

/// A required out-pointer: NULL is `LB_RESULT_NULL_PARAMETER`. Check every out-pointer
/// before doing any work, and write through it only on success.
///
/// # Safety
/// A non-NULL `ptr` is valid for one write of `T` during `'a`.
pub(crate) unsafe fn try_out<'a, T>(ptr: *mut T) -> Result<Out<'a, T>, lb_result> {
    if ptr.is_null() {
        Err(lb_result::NullParameter)
    } else {
        Ok(Out(ptr, core::marker::PhantomData))
    }
}

/// The shape of every getter: borrows the value behind `handle`, checks `out`, and writes
/// `read(value)` there (nothing is read or written when either pointer is NULL).
///
/// # Safety
/// As [`try_ref`] for `handle` and [`try_out`] for `out`.
pub(crate) unsafe fn read_into<C: Castable, T>(
    handle: *const C,
    out: *mut T,
    read: impl FnOnce(&C::Rust) -> T,
) -> Result<(), lb_result> {
    // SAFETY: forwarded contracts.
    let (value, out) = unsafe { (try_ref(handle)?, try_out(out)?) };
    out.write(read(value));
    Ok(())
}

/// An optional out-pointer: NULL means the caller does not want this output.
///
/// # Safety
/// As [`try_out`].
pub(crate) unsafe fn opt_out<'a, T>(ptr: *mut T) -> Option<Out<'a, T>> {
    // SAFETY: forwarded contract.
    unsafe { try_out(ptr) }.ok()
}

/// A checked, non-NULL out-pointer. Writing does not read or drop the old value (C may have
/// left it uninitialised).
pub(crate) struct Out<'a, T>(*mut T, core::marker::PhantomData<&'a mut T>);

impl<T> Out<'_, T> {
    /// Writes the output.
    pub(crate) fn write(self, value: T) {
        // SAFETY: the pointer is non-NULL (checked in `try_out`) and valid for one write by
        // the contract of `try_out`; `write` does not read or drop the previous contents.
        unsafe { self.0.write(value) }
    }
}

impl OutSlice<'_, u8> {
    /// Writes `bytes` starting at `offset`.
    ///
    /// # Panics
    /// If they do not fit (a bug in liblb; callers check sizes first).
    pub(crate) fn write_bytes(&mut self, offset: usize, bytes: &[u8]) {
        let end = offset
            .checked_add(bytes.len())
            .expect("output size overflow");
        assert!(
            end <= self.len,
            "output bytes {offset}..{end} out of bounds {}",
            self.len
        );
        // SAFETY: `offset..end` lies within the caller's `len` writable bytes (checked above),
        // and `bytes` is Rust memory, so the two ranges cannot overlap.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(offset), bytes.len()) }
    }
}
