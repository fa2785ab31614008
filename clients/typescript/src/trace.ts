// W3C trace context (`traceparent`, `tracestate`) into every try's gRPC metadata, so
// the daemon's RPC span joins the gateway's trace (docs/observability.md, "Traces").
//
// Two sources, no heavy dependency:
// - a `traceparent` (and optional `tracestate`) the caller passes with the call;
// - otherwise, when the gateway has `@opentelemetry/api` installed, the active context
//   through its global propagator (nothing is written when none was registered, like
//   the Rust client).
// A malformed `traceparent` is dropped, never sent and never an error.

/** The W3C trace context of one call. */
export interface TraceContext {
  traceparent?: string;
  tracestate?: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** Whether `value` is a W3C `traceparent` a receiver would accept (version 00 exactly, later versions by prefix). */
export function validTraceparent(value: string): boolean {
  const m = TRACEPARENT.exec(value);
  if (!m) {
    return false;
  }
  const [, version, traceId, spanId, , rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) {
    return false;
  }
  return !/^0+$/.test(traceId) && !/^0+$/.test(spanId);
}

/** The few members of `@opentelemetry/api` used here. */
interface OtelApi {
  context: { active(): unknown };
  propagation: {
    inject(context: unknown, carrier: Record<string, string>, setter?: unknown): void;
  };
}

let otel: OtelApi | null | undefined;

function loadOtel(): OtelApi | null {
  if (otel === undefined) {
    try {
      // Optional: present only when the gateway uses OpenTelemetry.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      otel = require('@opentelemetry/api') as OtelApi;
    } catch {
      otel = null;
    }
  }
  return otel;
}

/** The `traceparent`/`tracestate` pairs to send for a call: the caller's, else the active OpenTelemetry context's. */
export function traceHeaders(given: TraceContext | undefined): Array<[string, string]> {
  if (given?.traceparent !== undefined) {
    const tp = given.traceparent.trim().toLowerCase();
    if (!validTraceparent(tp)) {
      return [];
    }
    const out: Array<[string, string]> = [['traceparent', tp]];
    if (given.tracestate !== undefined && /^[\x20-\x7e]*$/.test(given.tracestate) && given.tracestate.trim() !== '') {
      out.push(['tracestate', given.tracestate.trim()]);
    }
    return out;
  }
  const api = loadOtel();
  if (api === null) {
    return [];
  }
  const carrier: Record<string, string> = {};
  try {
    api.propagation.inject(api.context.active(), carrier);
  } catch {
    return [];
  }
  const out: Array<[string, string]> = [];
  const tp = carrier['traceparent'];
  if (typeof tp === 'string' && validTraceparent(tp)) {
    out.push(['traceparent', tp]);
    const ts = carrier['tracestate'];
    if (typeof ts === 'string' && ts !== '' && /^[\x20-\x7e]*$/.test(ts)) {
      out.push(['tracestate', ts]);
    }
  }
  return out;
}
