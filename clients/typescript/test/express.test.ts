// The Express integration over real HTTP (node's fetch against app.listen on a free
// port) against the real daemon (embedded store, temp directory, free port) with the
// realms `default` and `stepup` (`unknown_device = "step_up"`): right, wrong and
// unknown logins; one lockout across two gateway processes; one reset page for known
// and unknown addresses; every daemon failure a refused login; one code page in a
// step-up realm.

import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ChildProcess, execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { Daemon, startDaemon } from './support/daemon';
import { startCaseEndpoint } from './support/endpoint';
import { PortcullisExpressError } from '../src/express';
import { KNOWN_DOMAIN, PAGES, PASSWORD, Page, TestApp, UNUSABLE_HASHES, post, startApp } from './support/express-app';

const CONFIG = `shutdown_delay = "0s"
[store]
operation_timeout = "5s"
[realms.default]
[realms.stepup]
unknown_device = "step_up"
`;
/** Failed attempts the default realm allows before it locks (the sixth is denied). */
const ALLOWANCE = 5;

let daemon: Daemon;
let app: TestApp;

before(async () => {
  daemon = await startDaemon(CONFIG);
  app = await startApp({ daemonUrl: daemon.url });
});

after(async () => {
  await app?.close();
  await daemon?.stop();
});

function known(what: string): string {
  return `${what}-${randomUUID().slice(0, 8)}${KNOWN_DOMAIN}`;
}

function unknown(what: string): string {
  return `${what}-${randomUUID().slice(0, 8)}@nobody.example`;
}

/** A fresh documentation address per call: each test's client network is its own. */
let hosts = 0;
function clientIp(): string {
  hosts += 1;
  return `203.0.113.${hosts}`;
}

function login(url: string, identifier: string, password: string, ip: string, cookie?: string): Promise<Page> {
  return post(`${url}/login`, { username: identifier, password }, ip, cookie);
}

/** The tokens left in the bucket of the client network `clientKey` (portcullis inspect-network). */
async function networkTokens(clientKey: string): Promise<number> {
  const args = ['inspect-network', '--addr', daemon.url, '--realm', 'default', '--client-key', clientKey];
  const r = await promisify(execFile)(daemon.binary, args, { timeout: 10000 }).catch((e: { stdout?: string }) => ({
    stdout: e.stdout ?? '',
  }));
  const m = /^tokens:\s*(\d+)/m.exec(r.stdout);
  assert.ok(m, `inspect-network printed no tokens line:\n${r.stdout}`);
  return Number(m[1]);
}

test('express: the right password signs in and sets the device cookie; a wrong one and an unknown account get the same failure page', async () => {
  const ip = clientIp();
  const id = known('right');
  const right = await login(app.url, id, PASSWORD, ip);
  assert.equal(right.status, 200, right.body);
  assert.equal(right.body, PAGES.welcome);
  assert.equal(right.cacheControl, 'no-store');
  const cookie = right.setCookie.find((c) => c.startsWith(`${app.gate.deviceCookieName(id)}=`));
  assert.ok(cookie, `a device cookie: ${JSON.stringify(right.setCookie)}`);
  for (const attribute of ['HttpOnly', 'Secure', 'SameSite=Lax', 'Path=/']) {
    assert.ok(cookie.split('; ').includes(attribute), `${attribute} in ${cookie.replace(/=[^;]*/, '=…')}`);
  }
  // The browser sends it back: signed in again.
  const again = await login(app.url, id, PASSWORD, ip, cookie.split(';')[0]);
  assert.equal(again.status, 200);

  const wrong = await login(app.url, known('wrong'), 'not the password', ip);
  const nobody = await login(app.url, unknown('nobody'), 'not the password', ip);
  assert.equal(wrong.status, 401);
  assert.deepEqual(nobody, wrong, 'a wrong password and an unknown account look the same');
  assert.equal(wrong.body, PAGES.failed);
  assert.deepEqual(wrong.setCookie, [], 'no cookie on a refused login');
  // The unknown account was counted like any other (the daemon was asked, with an empty hash).
  assert.equal(await daemon.failures(unknown('control')), 0);
  const counted = unknown('counted');
  await login(app.url, counted, 'not the password', ip);
  assert.equal(await daemon.failures(counted), 1);
  // The client key is req.ip under `trust proxy`: the forwarded address's network paid for the failures.
  assert.ok((await networkTokens(ip)) < 100, 'the forwarded client network was counted');
  assert.equal(await networkTokens('198.51.100.250'), 100, 'another network was not');
});

test('express: an account whose stored hash the daemon cannot use answers as an unknown one: the same pages, counted, the CAPTCHA at the same attempt', async () => {
  for (const [domain, hash] of Object.entries(UNUSABLE_HASHES)) {
    const before = app.events.length;
    const unusable = `unusable-${randomUUID().slice(0, 8)}${domain}`;
    const nobody = unknown('nobody');
    const [ipA, ipB] = [clientIp(), clientIp()];
    const unusablePages: Page[] = [];
    const nobodyPages: Page[] = [];
    // Distinct wrong passwords (a repeat is not counted), the right one last.
    const passwords = ['wrong-1', 'wrong-2', 'wrong-3', PASSWORD];
    for (const password of passwords) {
      unusablePages.push(await login(app.url, unusable, password, ipA));
      nobodyPages.push(await login(app.url, nobody, password, ipB));
    }
    assert.deepEqual(unusablePages, nobodyPages, `${domain}: page by page the same as an unknown account`);
    assert.deepEqual(
      nobodyPages.map((p) => p.body),
      [PAGES.failed, PAGES.failed, PAGES.captcha, PAGES.captcha],
      'the third attempt gets the CAPTCHA page',
    );
    assert.equal(await daemon.failures(unusable), passwords.length, `${domain}: every attempt was counted`);
    // One event a login, naming neither the account nor the hash.
    const events = app.events.slice(before);
    assert.equal(events.length, passwords.length);
    for (const event of events) {
      assert.deepEqual([event.type, event.realm, event.error.setting], ['unusable_stored_hash', 'default', 'lookupUser']);
      const printed = `${JSON.stringify(event)} ${event.error.message} ${event.error.stack ?? ''}`;
      assert.ok(!printed.includes(unusable.split('@')[0]) && !printed.includes(hash.slice(0, 7)), printed);
    }
  }
  assert.equal(app.errors.length, 0, 'no outcome carries it');
});

test('express: a lockout holds across two gateway processes pointed at one daemon', async () => {
  const children: ChildProcess[] = [];
  try {
    const urls: string[] = [];
    const pids = new Set<number>();
    for (let i = 0; i < 2; i++) {
      const child = spawn(process.execPath, [path.join(__dirname, 'support', 'express-child.js'), daemon.url], {
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      children.push(child);
      const line = await new Promise<string>((resolve, reject) => {
        child.stdout?.once('data', (d: Buffer) => resolve(d.toString()));
        child.once('exit', (code) => reject(new Error(`the gateway process exited (${code})`)));
      });
      const started = JSON.parse(line) as { url: string; pid: number };
      urls.push(started.url);
      pids.add(started.pid);
    }
    assert.equal(pids.size, 2, 'two processes');
    const ip = clientIp();
    const id = known('lockout');
    // Five wrong passwords, alternating between the two gateways: all refused.
    for (let i = 0; i < ALLOWANCE; i++) {
      const page = await login(urls[i % 2], id, `wrong-${i}`, ip);
      assert.equal(page.status, 401, `wrong password ${i}`);
    }
    // The door is shut for the account on both: the right password is refused too.
    for (const url of urls) {
      const page = await login(url, id, PASSWORD, ip);
      assert.equal(page.status, 401, `the right password through ${url} after the lockout`);
      assert.notEqual(page.body, PAGES.welcome);
    }
    assert.equal(await daemon.failures(id), ALLOWANCE + 2);
    // The control: the same password for an account that is not locked, through either.
    for (const url of urls) {
      assert.equal((await login(url, known('open'), PASSWORD, ip)).status, 200);
    }
  } finally {
    for (const child of children) {
      child.stdin?.end();
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }
});

test('express: the reset page is the same for known and unknown addresses; a mail goes only to a known one', async () => {
  const ip = clientIp();
  const id = known('reset');
  const forKnown = await post(`${app.url}/password/reset`, { username: id }, ip);
  const forUnknown = await post(`${app.url}/password/reset`, { username: unknown('reset') }, ip);
  // Over the daemon's cap (one reset mail a minute per account): the same page, no mail.
  const again = await post(`${app.url}/password/reset`, { username: id }, ip);
  const noName = await post(`${app.url}/password/reset`, {}, ip);
  assert.equal(forKnown.status, 200);
  assert.equal(forKnown.body, PAGES.reset);
  for (const page of [forUnknown, again, noName]) {
    assert.deepEqual(page, forKnown);
  }
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(
    app.mails.filter((m) => m === id || !m.endsWith(KNOWN_DOMAIN)),
    [id],
    'one mail, to the known address',
  );
});

test('express: every daemon failure is a refused login, and a lookup that throws too', async () => {
  const cases: Array<[string, Parameters<typeof startCaseEndpoint>[0], number]> = [
    ['unreachable', { fault: { unreachable: true } }, 503],
    ['no answer within the deadline', { fault: { delay_ms: 1500 } }, 503],
    ['not HTTP/2', { fault: { garbage: true } }, 503],
    ['UNAVAILABLE', { fault: { status: 14 } }, 503],
    ['INTERNAL', { fault: { status: 13 } }, 401],
    ['PERMISSION_DENIED', { fault: { status: 7 } }, 401],
    ['an unknown verdict', { answer: { verdict: 99, device_token: 'must-not-pass' } }, 401],
    ['VERDICT_UNSPECIFIED', { answer: {} }, 401],
    ['a challenge without a token', { answer: { verdict: 3 } }, 401],
  ];
  // The control: the same endpoint answering an accept is a sign-in, so the refusals
  // below are the failures' doing.
  const accept = await startCaseEndpoint({ answer: { verdict: 1 } });
  const control = await startApp({ daemonUrl: accept.url, callTimeoutMs: 1000 });
  try {
    assert.equal((await login(control.url, known('control'), PASSWORD, clientIp())).status, 200);
  } finally {
    await control.close();
    await accept.close();
  }
  for (const [name, behaviour, status] of cases) {
    const endpoint = await startCaseEndpoint(behaviour);
    const failing = await startApp({ daemonUrl: endpoint.url, callTimeoutMs: 1000 });
    try {
      const page = await login(failing.url, known('failure'), PASSWORD, clientIp());
      assert.equal(page.status, status, `${name}: ${page.body}`);
      assert.deepEqual(page.setCookie, [], `${name}: no cookie`);
      const reset = await post(`${failing.url}/password/reset`, { username: known('failure') }, clientIp());
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(failing.mails, [], `${name}: no reset mail`);
      assert.ok(reset.status === 503 || reset.body === PAGES.reset, `${name}: the reset page or 503`);
    } finally {
      await failing.close();
      await endpoint.close();
    }
  }
  // The user store failing: refused, retryable; the app sees its own error.
  const broken = await startApp({ daemonUrl: daemon.url, lookupThrows: true });
  try {
    const page = await login(broken.url, known('lookup'), PASSWORD, clientIp());
    assert.deepEqual([page.status, page.body], [503, PAGES.unavailable]);
    assert.equal(broken.errors.length, 1);
  } finally {
    await broken.close();
  }
});

test('express: a lookupUser that never settles is a refused login (503) and no mail after lookupTimeoutMs, not a hung request', async () => {
  const hung = await startApp({ daemonUrl: daemon.url, lookupHangs: true, lookupTimeoutMs: 300 });
  try {
    const within = <T>(p: Promise<T>) =>
      Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the request hung')), 5000))]);
    const started = performance.now();
    const page = await within(login(hung.url, known('hung'), PASSWORD, clientIp()));
    assert.deepEqual([page.status, page.body, page.setCookie], [503, PAGES.unavailable, []]);
    assert.ok(performance.now() - started >= 300, 'not before the timeout');
    const reset = await within(post(`${hung.url}/password/reset`, { username: known('hung') }, clientIp()));
    assert.deepEqual([reset.status, reset.body], [503, PAGES.unavailable]);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(hung.mails, []);
    assert.equal(hung.errors.length, 2);
    for (const error of hung.errors) {
      assert.ok(error instanceof PortcullisExpressError && error.setting === 'lookupTimeoutMs', String(error));
    }
  } finally {
    await hung.close();
  }
});

test('express: an accept that asks for a second factor is no sign-in: its own outcome, no device cookie', async () => {
  for (const signal of ['spray_suspected', 'step_up']) {
    const endpoint = await startCaseEndpoint({ answer: { verdict: 1, device_token: 'dt-from-the-daemon', [signal]: true } });
    const gateway = await startApp({ daemonUrl: endpoint.url, callTimeoutMs: 1000 });
    try {
      const page = await login(gateway.url, known('second-factor'), PASSWORD, clientIp());
      assert.deepEqual([page.status, page.body, page.setCookie], [200, PAGES.secondFactor, []], signal);
    } finally {
      await gateway.close();
      await endpoint.close();
    }
  }
});

test('express: in a step-up realm a right password from a new device and every refused login get one code page; a code is sent only for the first', async () => {
  const stepup = await startApp({ daemonUrl: daemon.url, realm: 'stepup', stepUp: true });
  try {
    const ip = clientIp();
    const id = known('stepup');
    const right = await login(stepup.url, id, PASSWORD, ip);
    assert.equal(stepup.challenges.length, 1, 'a code for the right password');
    assert.equal(stepup.challenges[0].identifier, id);
    const wrong = await login(stepup.url, id, 'not the password', ip);
    const nobody = await login(stepup.url, unknown('stepup'), PASSWORD, ip);
    // A made-up device cookie changes nothing the page shows.
    const forged = await login(
      stepup.url,
      known('stepup-forged'),
      'not the password',
      ip,
      `${stepup.gate.deviceCookieName(id)}=forged-token`,
    );
    assert.deepEqual([right.status, right.body], [200, PAGES.code]);
    for (const page of [wrong, nobody, forged]) {
      assert.deepEqual(page, right, 'one page for a challenge and a refused login');
    }
    assert.equal(stepup.challenges.length, 1, 'no code for a refused login');

    // The code step passed (the app's own): the challenge token becomes the device
    // cookie, and the next login from this browser is a sign-in.
    const { challengeToken, storedHash } = stepup.challenges[0];
    const confirmed = await stepup.client.confirmDevice({ realm: 'stepup', identifier: id, challengeToken, storedHash });
    assert.equal(confirmed.decision, 'allow');
    const cookie = `${stepup.gate.deviceCookieName(id)}=${encodeURIComponent(confirmed.deviceToken ?? '')}`;
    const signedIn = await login(stepup.url, id, PASSWORD, ip, cookie);
    assert.deepEqual([signedIn.status, signedIn.body], [200, PAGES.welcome]);
    // With that cookie a wrong password still gets the code page, not "wrong password".
    const wrongWithCookie = await login(stepup.url, id, 'not the password', ip, cookie);
    assert.deepEqual(wrongWithCookie, right);
  } finally {
    await stepup.close();
  }
});
