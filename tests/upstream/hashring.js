// npm `hashring`'s placement, for comparison with liblb's `ketama`.
//
//   node hashring.js < request.json
//
// request: {"servers": {"host:port": weight, ...}, "keys": [...], "range": n}. Prints, per
// key, the server `get(key)` picks, then (with "range") the `range(key, n)` list, tab-separated.
'use strict';
const HashRing = require('hashring');

let input = '';
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const request = JSON.parse(input);
  const ring = new HashRing(request.servers, 'md5', { 'default port': 11211, 'max cache size': 1 });
  const lines = request.keys.map((key) => {
    const picked = ring.get(key);
    return request.range ? `${picked}\t${ring.range(key, request.range).join(' ')}` : picked;
  });
  process.stdout.write(lines.join('\n') + '\n');
});
