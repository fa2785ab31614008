// Why a TLS connection to the daemon failed, in words a developer or an operator can
// act on ("TLS handshake refused: …"), read from the error grpc-js reports for a
// connection it could not establish.
//
// In TLS 1.3 the daemon checks the client certificate after the client considers the
// handshake finished: a certificate it refuses comes back as a TLS alert on the first
// read, which grpc-js reports as `UNAVAILABLE` with OpenSSL's error text
// ("…:sslv3 alert certificate expired:…:SSL alert number 45"), and a daemon
// certificate this client refuses as Node's verification error ("unable to verify the
// first certificate", ERR_TLS_CERT_ALTNAME_INVALID). Both are in the status's details,
// so no handshake of our own is needed: the explanation is made from that text at once.
//
// The explanation never changes an answer: the call is a deny (a transport failure,
// retried and counted as before) whether or not it is explained. It holds the alert's
// name and OpenSSL's or Node's description of the failure, never a key, a token or a
// file's contents.

/** TLS alert numbers (RFC 8446, 6.2 and RFC 5246, 7.2) and their names. */
const ALERTS: ReadonlyMap<number, string> = new Map([
  [0, 'close_notify'],
  [10, 'unexpected_message'],
  [20, 'bad_record_mac'],
  [22, 'record_overflow'],
  [40, 'handshake_failure'],
  [42, 'bad_certificate'],
  [43, 'unsupported_certificate'],
  [44, 'certificate_revoked'],
  [45, 'certificate_expired'],
  [46, 'certificate_unknown'],
  [47, 'illegal_parameter'],
  [48, 'unknown_ca'],
  [49, 'access_denied'],
  [50, 'decode_error'],
  [51, 'decrypt_error'],
  [70, 'protocol_version'],
  [71, 'insufficient_security'],
  [80, 'internal_error'],
  [86, 'inappropriate_fallback'],
  [90, 'user_canceled'],
  [109, 'missing_extension'],
  [110, 'unsupported_extension'],
  [112, 'unrecognized_name'],
  [113, 'bad_certificate_status_response'],
  [115, 'unknown_psk_identity'],
  [116, 'certificate_required'],
  [120, 'no_application_protocol'],
]);

/** What the daemon's alert says about this client's certificate (rustls's mapping of its verifier's errors). */
const REFUSED_CERTIFICATE: Readonly<Record<string, string>> = {
  certificate_expired: 'it has expired or is not yet valid',
  unknown_ca: 'it is not signed by a CA the daemon trusts',
  unsupported_certificate: 'its extended key usage does not allow client authentication',
  bad_certificate: 'it could not be decoded',
  certificate_unknown: 'the daemon cannot use it (an X.509 v1 certificate, or another defect)',
  certificate_revoked: 'it has been revoked',
  decrypt_error: "its signature, or the handshake's, does not verify",
};

/** The other alerts a daemon (or a TLS proxy in front of it) ends a handshake with. */
const OTHER_ALERTS: Readonly<Record<string, string>> = {
  access_denied: 'the daemon refused this client (access_denied)',
  handshake_failure: 'the daemon and this client share no TLS version, cipher suite or key exchange (handshake_failure)',
  protocol_version: 'the daemon and this client share no TLS version (protocol_version)',
  insufficient_security: 'the daemon wants stronger ciphers than this client offered (insufficient_security)',
  no_application_protocol: 'the daemon does not speak HTTP/2 on this port (no_application_protocol)',
  unrecognized_name: 'the daemon has no certificate for the name this client asked for (unrecognized_name)',
};

/** Node's (OpenSSL's) words for a daemon certificate that does not chain to `tls.caFile`. */
const UNTRUSTED_ISSUER =
  /unable to verify the first certificate|unable to get local issuer certificate|unable to get issuer certificate|self[- ]signed certificate/i;

/** What this client knows of its own TLS settings, to say what to change. */
export interface TlsSide {
  /** Whether a client certificate (`tls.certFile`, `tls.keyFile`) is configured. */
  identity: boolean;
  /** The name the daemon's certificate is checked against: `tls.domainName`, else the endpoint's host. */
  serverName: string;
}

/**
 * The explanation of a failed connection, from the details of the status grpc-js made
 * up for it: `'TLS handshake refused: …'`, or `undefined` when the text shows no TLS
 * refusal (a refused connection, a reset, a timeout).
 */
export function tlsRefusal(details: unknown, side: TlsSide): string | undefined {
  if (typeof details !== 'string' || details === '') return undefined;
  const alert = alertName(details);
  if (alert !== undefined) {
    return `TLS handshake refused: ${alertMessage(alert, side.identity)}`;
  }
  const daemon = daemonCertificate(details, side.serverName);
  return daemon === undefined ? undefined : `TLS handshake refused: ${daemon}`;
}

/** The name of the TLS alert OpenSSL reports in `details` (`certificate_expired`), if any. */
export function alertName(details: string): string | undefined {
  const number = /SSL alert number (\d+)/.exec(details);
  if (number !== null) {
    return ALERTS.get(Number(number[1])) ?? `number ${number[1]}`;
  }
  // Without the number (BoringSSL, other OpenSSL builds): SSLV3_ALERT_CERTIFICATE_EXPIRED
  // or "sslv3 alert certificate expired".
  const named = /\b(?:sslv3|tlsv1|tlsv13)[ _]alert[ _]([a-z]+(?:[ _][a-z]+)*)/i.exec(details);
  return named === null ? undefined : named[1].toLowerCase().replace(/ /g, '_');
}

/** What the daemon's alert `alert` means for this client. */
export function alertMessage(alert: string, identity: boolean): string {
  if (alert === 'certificate_required') {
    return identity
      ? 'the daemon requires a client certificate and got none it could use (certificate_required)'
      : 'the daemon requires a client certificate (certificate_required): set tls.certFile and tls.keyFile';
  }
  const refused = REFUSED_CERTIFICATE[alert];
  if (refused !== undefined) {
    return identity
      ? `the daemon refused this client certificate: ${refused} (${alert})`
      : `the daemon refused the handshake (${alert}); no client certificate is configured (tls.certFile, tls.keyFile)`;
  }
  return OTHER_ALERTS[alert] ?? `the daemon ended the handshake with the TLS alert ${alert}`;
}

/** Why this client refused the daemon's certificate, from Node's verification error in `details`. */
function daemonCertificate(details: string, serverName: string): string | undefined {
  if (details.includes('ERR_TLS_CERT_ALTNAME_INVALID') || /does not match certificate's altnames/i.test(details)) {
    return (
      `the daemon's certificate does not carry the name ${serverName}: ` +
      'connect by a name it carries, or set tls.domainName to one (ERR_TLS_CERT_ALTNAME_INVALID)'
    );
  }
  const found = UNTRUSTED_ISSUER.exec(details);
  if (found !== null) {
    return `the daemon's certificate is not signed by a CA in tls.caFile (${found[0]})`;
  }
  if (/certificate has expired/i.test(details)) {
    return "the daemon's certificate has expired (certificate has expired)";
  }
  if (/certificate is not yet valid/i.test(details)) {
    return "the daemon's certificate is not yet valid (certificate is not yet valid)";
  }
  if (/unsupported certificate purpose/i.test(details)) {
    return "the daemon's certificate is not for server authentication: its extended key usage lacks serverAuth (unsupported certificate purpose)";
  }
  if (/wrong version number|packet length too long|record layer failure/i.test(details)) {
    return 'the endpoint does not answer TLS: is it an http:// endpoint?';
  }
  return undefined;
}
