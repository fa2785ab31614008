#!/usr/bin/env node
// Before `npm test`: the daemon tests need the `portcullis` binary. PORTCULLIS_BINARY
// names one; otherwise the repository's target/debug/portcullis is used, built here
// with `cargo build --bin portcullis` at the repository root when it is missing.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const fromEnv = process.env.PORTCULLIS_BINARY;
if (fromEnv) {
  if (!fs.existsSync(fromEnv)) {
    console.error(`PORTCULLIS_BINARY=${fromEnv}: no such file`);
    process.exit(1);
  }
  process.exit(0);
}
const root = path.resolve(__dirname, '..', '..', '..');
const binary = path.join(root, 'target', 'debug', 'portcullis');
if (fs.existsSync(binary)) {
  process.exit(0);
}
console.error(`${binary} is missing: building it (cargo build --bin portcullis)`);
const r = spawnSync('cargo', ['build', '--bin', 'portcullis'], { cwd: root, stdio: 'inherit' });
if (r.error || r.status !== 0 || !fs.existsSync(binary)) {
  console.error('the daemon could not be built: fix the build, or set PORTCULLIS_BINARY to a built portcullis');
  process.exit(1);
}
