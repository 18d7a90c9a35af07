'use strict'
// Shared assertions for the liblb test suite.
const assert = require('node:assert/strict')

/** Asserts that `fn` throws a liblb `Error` with this `code` whose message mentions `mention`. */
function throwsCode(fn, code, mention) {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof Error, `expected an Error, got ${err}`)
    assert.ok(!(err instanceof TypeError), `expected a plain Error, got a TypeError: ${err.message}`)
    assert.equal(err.code, code, `wrong code for: ${err.message}`)
    if (mention !== undefined) {
      assert.ok(err.message.includes(mention), `message ${JSON.stringify(err.message)} lacks ${mention}`)
    }
    return true
  })
}

/** Asserts that `fn` throws a `TypeError` whose message mentions `mention`. */
function throwsType(fn, mention) {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof TypeError, `expected a TypeError, got ${err && err.constructor.name}: ${err && err.message}`)
    assert.equal(err.code, 'ERR_INVALID_ARG_TYPE')
    if (mention !== undefined) {
      assert.ok(err.message.includes(mention), `message ${JSON.stringify(err.message)} lacks ${mention}`)
    }
    return true
  })
}

/**
 * Asserts that `fn` throws a `RangeError` with this `code` (default `ERR_OUT_OF_RANGE`, Node's
 * own code for a number out of range) whose message mentions `mention`.
 */
function throwsRange(fn, mention, code = 'ERR_OUT_OF_RANGE') {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof RangeError, `expected a RangeError, got ${err && err.constructor.name}: ${err && err.message}`)
    assert.equal(err.code, code)
    if (mention !== undefined) {
      assert.ok(err.message.includes(mention), `message ${JSON.stringify(err.message)} lacks ${mention}`)
    }
    return true
  })
}

module.exports = { throwsCode, throwsRange, throwsType }
