// The package as a gateway team gets it (`npm run test:package`, run by .ci/run):
// `npm pack`, then `npm install ./portcullis-client-*.tgz` (and express) into an empty
// directory outside the repository, then scripts there that load it with `require`
// and with `import`, call a running daemon, and serve a login through the Express
// integration; and a TypeScript file there that type-checks against the installed
// types. Nothing there can reach the repository's proto/ or src/.

import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { Daemon, startDaemon } from '../support/daemon';
import { STORED_HASH } from '../support/express-app';

const PACKAGE_DIR = path.resolve(__dirname, '..', '..', '..');
const REPOSITORY = path.resolve(PACKAGE_DIR, '..', '..');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const run = promisify(execFile);

let daemon: Daemon;
let dir: string;

before(async () => {
  daemon = await startDaemon();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'portcullis-ts-package-'));
});

after(async () => {
  await daemon?.stop();
  if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true });
});

/** Runs `file` (in the consumer directory) with node; its stdout's last line, parsed. */
async function node(file: string, env: Record<string, string> = {}): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, [file], {
    cwd: dir,
    env: { PATH: process.env['PATH'], DAEMON_URL: daemon.url, STORED_HASH, ...env },
    timeout: 60000,
  });
  const lines = stdout.trim().split('\n');
  return JSON.parse(lines[lines.length - 1]) as Record<string, unknown>;
}

const CJS = `'use strict';
const { Client, Answer, clientKeyFromForwarded } = require('@portcullis/client');
const { portcullisExpress, loginOutcome } = require('@portcullis/client/express');
const { Verdict } = require('@portcullis/client/types');
(async () => {
  const client = new Client({ endpoints: [process.env.DAEMON_URL] });
  const admitted = await client.admit('default', 'cjs@example.com');
  const verified = await client.verify({ realm: 'default', identifier: 'cjs@example.com', password: 'guess', storedHash: '', clientKey: clientKeyFromForwarded('192.0.2.1', undefined, 0) });
  client.close();
  console.log(JSON.stringify({
    admit: admitted.decision, verify: verified.decision, answerClass: admitted instanceof Answer,
    express: typeof portcullisExpress === 'function' && typeof loginOutcome === 'function', accept: Verdict.ACCEPT,
  }));
})();
`;

const ESM = `import { Client, Answer } from '@portcullis/client';
import { portcullisExpress, loginOutcome } from '@portcullis/client/express';
import { createRequire } from 'node:module';
import express from 'express';

const require = createRequire(import.meta.url);
const client = new Client({ endpoints: [process.env.DAEMON_URL] });
const gate = portcullisExpress({
  client,
  realm: 'default',
  lookupUser: (identifier) => (identifier === 'alice@example.com' ? process.env.STORED_HASH : undefined),
  deviceCookie: { secret: 'the secret of the package test, 32 bytes or more' },
});
const app = express();
app.post('/login', express.urlencoded({ extended: false }), gate.login, (req, res) => {
  const outcome = loginOutcome(res);
  res.status(outcome.kind === 'allow' ? 200 : outcome.kind === 'deny' && outcome.retryable ? 503 : 401).send(outcome.kind);
});
const server = app.listen(0, '127.0.0.1');
await new Promise((r) => server.once('listening', r));
const url = 'http://127.0.0.1:' + server.address().port + '/login';
const form = (username, password) => ({ method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ username, password }).toString() });
const right = await fetch(url, form('alice@example.com', 'correct horse battery staple'));
const wrong = await fetch(url, form('bob@example.com', 'correct horse battery staple'));
const admitted = await client.admit('default', 'esm@example.com');
server.close();
client.close();
console.log(JSON.stringify({
  right: right.status, rightCookie: right.headers.getSetCookie().length, wrong: wrong.status, admit: admitted.decision,
  sameClass: require('@portcullis/client').Answer === Answer,
}));
`;

const TS = `import { Answer, Client, ClientConfig } from '@portcullis/client';
import { LoginOutcome, portcullisExpress, resetOutcome } from '@portcullis/client/express';
import { Verdict, VerifyResponse } from '@portcullis/client/types';

const config: ClientConfig = { endpoints: ['http://127.0.0.1:50051'], keepaliveTimeMs: 30000 };
const client = new Client(config);
const gate = portcullisExpress({ client, realm: 'default', lookupUser: async () => undefined, deviceCookie: { secret: new Uint8Array(32) } });
export function kind(outcome: LoginOutcome): string {
  return outcome.kind === 'challenge' ? String(outcome.sendCode) : outcome.kind;
}
export const accept: Verdict = Verdict.ACCEPT;
export type V = VerifyResponse['verdict'];
export const answer: Promise<Answer> = client.admit('default', 'x');
export const login = gate.login;
// The README's reset handler: a mail is queued for the identifier only when sendMail.
export function queued(res: Parameters<typeof resetOutcome>[0], queue: (identifier: string) => void): void {
  const outcome = resetOutcome(res);
  if (outcome.sendMail) queue(outcome.identifier);
}
`;

test('npm pack, npm install into an empty directory outside the repository, then require, import and TypeScript all work', async () => {
  // `npm run test:package` has just built the package, as `prepack` would: its scripts
  // are skipped here because prepack's clean would delete this running test's dist/.
  const scripts = (JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
    .scripts;
  assert.equal(scripts['prepack'], 'npm run build', 'npm pack builds the package');
  const { stdout: packed } = await run(NPM, ['pack', '--ignore-scripts', '--pack-destination', dir, '--json'], {
    cwd: PACKAGE_DIR,
    maxBuffer: 16 * 1024 * 1024,
    timeout: 240000,
  });
  const [{ filename, files }] = JSON.parse(packed) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const shipped = files.map((f) => f.path);
  for (const needed of [
    'dist/src/index.js',
    'dist/src/index.mjs',
    'dist/src/express/index.mjs',
    'dist/src/gen/portcullis/v1/governor_pb.js',
    'LICENSE-MIT',
  ]) {
    assert.ok(shipped.includes(needed), `the tarball ships ${needed}`);
  }
  assert.ok(!shipped.some((f) => f.startsWith('dist/test/') || f.startsWith('test/')), 'no tests in the tarball');
  assert.ok(path.relative(REPOSITORY, dir).startsWith('..'), 'the consumer is outside the repository');

  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }));
  // The consumer's own express and types, at the versions this package is tested with.
  const dev = (JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> })
    .devDependencies;
  const theirs = ['express', '@types/express', '@types/node'].map((name) => `${name}@${dev[name]}`);
  await run(NPM, ['install', '--no-audit', '--no-fund', '--prefer-offline', `./${filename}`, ...theirs], { cwd: dir, timeout: 240000 });

  fs.writeFileSync(path.join(dir, 'cjs.cjs'), CJS);
  assert.deepEqual(await node('cjs.cjs'), { admit: 'allow', verify: 'deny', answerClass: true, express: true, accept: 1 });

  fs.writeFileSync(path.join(dir, 'esm.mjs'), ESM);
  assert.deepEqual(await node('esm.mjs'), { right: 200, rightCookie: 1, wrong: 401, admit: 'allow', sameClass: true });

  fs.writeFileSync(path.join(dir, 'consumer.ts'), TS);
  const tsc = path.join(PACKAGE_DIR, 'node_modules', 'typescript', 'bin', 'tsc');
  const flags = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--types', 'node', 'consumer.ts'];
  await run(process.execPath, [tsc, ...flags], { cwd: dir, timeout: 120000 }).catch((e: { stdout?: string }) => {
    assert.fail(`consumer.ts does not type-check against the installed package:\n${e.stdout ?? ''}`);
  });
});
