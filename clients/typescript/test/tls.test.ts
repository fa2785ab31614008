// Against the real daemon over mutual TLS (certificates made with openssl): every client
// certificate the daemon refuses, and every daemon certificate this client refuses, is a
// deny whose failure says "TLS handshake refused:" and why; the configured caller's
// certificate is served.

import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';

import { Client, ClientEvent, ClientTls } from '../src';
import { alertName, tlsRefusal } from '../src/tls';
import { Daemon, startDaemon } from './support/daemon';
import { Leaf, Pki, makePki, mutualTlsConfig } from './support/pki';

let pki: Pki;
let daemon: Daemon;

before(async () => {
  pki = makePki();
  daemon = await startDaemon(mutualTlsConfig(pki), identity(pki.good));
});

after(async () => {
  await daemon?.stop();
  pki?.remove();
});

function identity(leaf: Leaf, caFile = pki.caFile): ClientTls {
  return { caFile, certFile: leaf.certFile, keyFile: leaf.keyFile };
}

/** One `recordAttempt` over mutual TLS with `tls`, and what `onEvent` was told. */
async function attempt(tls: ClientTls, endpoint = `https://localhost:${daemon.port}`) {
  const events: ClientEvent[] = [];
  const client = new Client({ endpoints: [endpoint], tls, ejectAfter: 100, onEvent: (e) => events.push(e) });
  try {
    const answer = await client.recordAttempt('default', 'tls@example.com');
    return { answer, events, check: await client.checkPassword('default', 'tls@example.com', 'a new password') };
  } finally {
    client.close();
  }
}

/** The answer is a retryable deny, a transport failure whose message is `expected`; every try's event says so too. */
async function refused(tls: ClientTls, expected: RegExp, endpoint?: string): Promise<void> {
  const { answer, events, check } = await attempt(tls, endpoint);
  assert.equal(answer.decision, 'deny');
  assert.equal(answer.retryable, true);
  assert.equal(answer.failure?.kind, 'transport', JSON.stringify(answer));
  const message = answer.failure?.kind === 'transport' ? answer.failure.message : undefined;
  if (message === undefined) assert.fail(`no message: ${JSON.stringify(answer)}`);
  assert.ok(message.startsWith('TLS handshake refused: '), message);
  assert.match(message, expected);
  const failures = events.filter((e) => e.type === 'transport_failure');
  assert.ok(failures.length >= 1);
  for (const e of failures) assert.equal(e.type === 'transport_failure' && e.message, message);
  // A check that could not be made is refused, with the same explanation.
  assert.deepEqual(check, { kind: 'unchecked', retryable: true, message });
  // Nothing secret in it: no key, no file's contents, no path.
  for (const file of [tls.keyFile, tls.certFile].filter((f) => f !== undefined)) {
    assert.ok(!message.includes(file), message);
    assert.ok(!message.includes(fs.readFileSync(file, 'utf8').split('\n')[1]), message);
  }
  assert.ok(!/PRIVATE KEY|BEGIN/.test(message), message);
}

test('the configured caller is served over mutual TLS', async () => {
  const { answer, events } = await attempt(identity(pki.good));
  assert.equal(answer.decision, 'allow', JSON.stringify(answer));
  assert.equal(answer.failure, undefined);
  assert.deepEqual(events, []);
});

test('an expired client certificate: certificate_expired', async () => {
  await refused(
    identity(pki.expired),
    /^TLS handshake refused: the daemon refused this client certificate: it has expired or is not yet valid \(certificate_expired\)$/,
  );
});

test('a client certificate not yet valid: certificate_expired', async () => {
  await refused(identity(pki.notYetValid), /it has expired or is not yet valid \(certificate_expired\)$/);
});

test('a client certificate of a CA the daemon does not trust: unknown_ca', async () => {
  await refused(
    identity(pki.otherCaLeaf),
    /^TLS handshake refused: the daemon refused this client certificate: it is not signed by a CA the daemon trusts \(unknown_ca\)$/,
  );
});

test('a client certificate for serverAuth only: unsupported_certificate', async () => {
  await refused(
    identity(pki.serverAuthOnly),
    /^TLS handshake refused: the daemon refused this client certificate: its extended key usage does not allow client authentication \(unsupported_certificate\)$/,
  );
});

test('an X.509 v1 client certificate: certificate_unknown', async (t) => {
  if (pki.v1 === undefined) {
    t.skip('this openssl makes no X.509 v1 certificate');
    return;
  }
  await refused(
    identity(pki.v1),
    /^TLS handshake refused: the daemon refused this client certificate: .*X\.509 v1 certificate.* \(certificate_unknown\)$/,
  );
});

test('no client certificate: certificate_required, and what to set', async () => {
  await refused(
    { caFile: pki.caFile },
    /^TLS handshake refused: the daemon requires a client certificate \(certificate_required\): set tls\.certFile and tls\.keyFile$/,
  );
});

test('a daemon certificate of a CA this client does not trust', async () => {
  await refused(
    identity(pki.good, pki.otherCaFile),
    /^TLS handshake refused: the daemon's certificate is not signed by a CA in tls\.caFile \(.+\)$/,
  );
});

test('a daemon certificate that does not carry the name the client checks', async () => {
  await refused(
    { ...identity(pki.good), domainName: 'wrong.test' },
    /^TLS handshake refused: the daemon's certificate does not carry the name wrong\.test: .*tls\.domainName/,
  );
});

test('an https:// endpoint that is plain HTTP/2', async () => {
  const plain = await startDaemon();
  try {
    await refused(identity(pki.good), /^TLS handshake refused: the endpoint does not answer TLS/, `https://localhost:${plain.port}`);
  } finally {
    await plain.stop();
  }
});

test('tlsRefusal reads OpenSSL and BoringSSL wordings, and nothing else', () => {
  const side = { identity: true, serverName: 'localhost' };
  assert.equal(alertName('…:sslv3 alert certificate expired:…:SSL alert number 45'), 'certificate_expired');
  assert.equal(alertName('error:10000418:SSL routines:OPENSSL_internal:TLSV1_ALERT_UNKNOWN_CA'), 'unknown_ca');
  assert.equal(alertName('…:tlsv13 alert certificate required:…'), 'certificate_required');
  assert.equal(alertName('SSL alert number 51'), 'decrypt_error');
  assert.equal(
    tlsRefusal('No connection established. Last error: x:SSL alert number 51', side),
    "TLS handshake refused: the daemon refused this client certificate: its signature, or the handshake's, does not verify (decrypt_error)",
  );
  assert.equal(tlsRefusal('x: SSL alert number 49', side), 'TLS handshake refused: the daemon refused this client (access_denied)');
  assert.equal(
    tlsRefusal('x: SSL alert number 42', side),
    'TLS handshake refused: the daemon refused this client certificate: it could not be decoded (bad_certificate)',
  );
  assert.equal(
    tlsRefusal('x: SSL alert number 200', side),
    'TLS handshake refused: the daemon ended the handshake with the TLS alert number 200',
  );
  for (const other of [
    'No connection established. Last error: Error: connect ECONNREFUSED 127.0.0.1:1. Resolution note: ',
    'Connection dropped',
    'Received RST_STREAM with code 2',
    '',
    undefined,
  ]) {
    assert.equal(tlsRefusal(other, side), undefined, String(other));
  }
});
