// Certificates for the TLS tests, made with the openssl command line in a temp
// directory: a CA, the daemon's certificate (localhost, 127.0.0.1), and client
// certificates the daemon accepts or refuses.

import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface Pki {
  dir: string;
  /** The CA of the daemon's certificate and of the client certificates. */
  caFile: string;
  /** A CA nothing here is signed by but `otherCaLeaf`. */
  otherCaFile: string;
  server: Leaf;
  /** SAN DNS:gateway.test, extended key usage clientAuth: the configured caller. */
  good: Leaf;
  /** As `good`, valid from 2020-01-01 to 2020-01-02. */
  expired: Leaf;
  /** As `good`, valid from 2090. */
  notYetValid: Leaf;
  /** As `good`, signed by the other CA. */
  otherCaLeaf: Leaf;
  /** As `good`, but extended key usage serverAuth only. */
  serverAuthOnly: Leaf;
  /** An X.509 v1 certificate (no extensions at all); `undefined` where openssl makes none. */
  v1: Leaf | undefined;
  remove: () => void;
}

export interface Leaf {
  certFile: string;
  keyFile: string;
}

function openssl(cwd: string, args: string[]): string {
  return execFileSync('openssl', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Makes every certificate of `Pki` in a fresh temp directory. */
export function makePki(): Pki {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'portcullis-ts-pki-'));
  const key = (name: string): string => {
    openssl(dir, ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', `${name}.key`]);
    return path.join(dir, `${name}.key`);
  };
  const ca = (name: string): void => {
    key(name);
    openssl(dir, [
      'req',
      '-x509',
      '-new',
      '-key',
      `${name}.key`,
      '-subj',
      `/CN=${name}`,
      '-days',
      '30',
      '-out',
      `${name}.pem`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
  };
  const csr = (name: string): void => {
    key(name);
    openssl(dir, ['req', '-new', '-key', `${name}.key`, '-subj', `/CN=${name}`, '-out', `${name}.csr`]);
  };
  const extensions = (san: string, eku: string): string =>
    `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName=${san}\nextendedKeyUsage=${eku}\n`;
  const leaf = (name: string, issuer: string, san: string, eku: string): Leaf => {
    csr(name);
    fs.writeFileSync(path.join(dir, `${name}.ext`), extensions(san, eku));
    openssl(dir, [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${issuer}.pem`,
      '-CAkey',
      `${issuer}.key`,
      '-CAcreateserial',
      '-days',
      '30',
      '-extfile',
      `${name}.ext`,
      '-out',
      `${name}.pem`,
    ]);
    return { certFile: path.join(dir, `${name}.pem`), keyFile: path.join(dir, `${name}.key`) };
  };
  // `openssl x509 -req` sets no dates in the past or future before OpenSSL 3.4
  // (-not_before/-not_after); `openssl ca` does with -startdate/-enddate.
  const dated = (name: string, start: string, end: string): Leaf => {
    csr(name);
    const db = path.join(dir, `${name}.db`);
    fs.mkdirSync(db);
    fs.writeFileSync(path.join(db, 'index.txt'), '');
    fs.writeFileSync(path.join(db, 'serial'), '1000\n');
    fs.writeFileSync(
      path.join(dir, `${name}.cnf`),
      [
        '[ca]',
        'default_ca = test',
        '[test]',
        `database = ${db}/index.txt`,
        `serial = ${db}/serial`,
        `new_certs_dir = ${db}`,
        'default_md = sha256',
        'policy = any',
        '[any]',
        'commonName = supplied',
        '[leaf]',
        extensions('DNS:gateway.test', 'clientAuth'),
      ].join('\n'),
    );
    openssl(dir, [
      'ca',
      '-batch',
      '-config',
      `${name}.cnf`,
      '-cert',
      'ca.pem',
      '-keyfile',
      'ca.key',
      '-in',
      `${name}.csr`,
      '-out',
      `${name}.pem`,
      '-extensions',
      'leaf',
      '-startdate',
      start,
      '-enddate',
      end,
      '-notext',
    ]);
    return { certFile: path.join(dir, `${name}.pem`), keyFile: path.join(dir, `${name}.key`) };
  };
  // X.509 v1: a certificate without extensions. OpenSSL 3.2 and later may add key
  // identifiers (and so make v3) unless told not to.
  const v1 = (): Leaf | undefined => {
    csr('v1');
    const attempts = [[], ['-extfile', 'v1.ext']];
    fs.writeFileSync(path.join(dir, 'v1.ext'), 'subjectKeyIdentifier = none\nauthorityKeyIdentifier = none\n');
    for (const extra of attempts) {
      try {
        openssl(dir, [
          'x509',
          '-req',
          '-in',
          'v1.csr',
          '-CA',
          'ca.pem',
          '-CAkey',
          'ca.key',
          '-CAcreateserial',
          '-days',
          '30',
          ...extra,
          '-out',
          'v1.pem',
        ]);
      } catch {
        continue;
      }
      if (/Version: 1 \(0x0\)/.test(openssl(dir, ['x509', '-in', 'v1.pem', '-noout', '-text']))) {
        return { certFile: path.join(dir, 'v1.pem'), keyFile: path.join(dir, 'v1.key') };
      }
    }
    return undefined;
  };

  ca('ca');
  ca('other-ca');
  return {
    dir,
    caFile: path.join(dir, 'ca.pem'),
    otherCaFile: path.join(dir, 'other-ca.pem'),
    server: leaf('server', 'ca', 'DNS:localhost,IP:127.0.0.1', 'serverAuth'),
    good: leaf('good', 'ca', 'DNS:gateway.test', 'clientAuth'),
    expired: dated('expired', '20200101000000Z', '20200102000000Z'),
    notYetValid: dated('not-yet-valid', '20900101000000Z', '20900102000000Z'),
    otherCaLeaf: leaf('other-ca-leaf', 'other-ca', 'DNS:gateway.test', 'clientAuth'),
    serverAuthOnly: leaf('server-auth-only', 'ca', 'DNS:gateway.test', 'serverAuth'),
    v1: v1(),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

/** The daemon's `[tls]` for mutual TLS with `pki`'s CA, and the caller the good certificate names. */
export function mutualTlsConfig(pki: Pki): string {
  return [
    '[tls]',
    `cert_file = ${JSON.stringify(pki.server.certFile)}`,
    `key_file = ${JSON.stringify(pki.server.keyFile)}`,
    `client_ca_file = ${JSON.stringify(pki.caFile)}`,
    '',
    '[callers.gateway]',
    'san_dns = ["gateway.test"]',
    'rpcs = ["Admit", "RecordAttempt", "Verify", "ClearAttempts"]',
    'realms = ["*"]',
    '',
  ].join('\n');
}
