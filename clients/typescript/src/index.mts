// @portcullis/client as an ES module: the CommonJS build's own objects, re-exported, so
// `import` and `require` in one process share one Client and Answer class (no second
// copy whose `instanceof` would disagree).

export { Answer, Client, ClientConfigError, DEFAULTS, clientKeyFromForwarded, validTraceparent } from './index.js';
export type {
  AnswerKind,
  CallOptions,
  ChallengeReason,
  ClearReason,
  ClientConfig,
  ClientEvent,
  ClientStats,
  ClientTls,
  CodeFlow,
  CountingOptions,
  Decision,
  DeviceConfirmation,
  Failure,
  Flow,
  GovernorMethod,
  Login,
  PasswordCheck,
  Signals,
  TraceContext,
} from './index.js';
