// @portcullis/client: the gateway library of Portcullis for Node. See README.md.

export { Answer, AnswerKind, ChallengeReason, Decision, PasswordCheck, Signals } from './answer';
export {
  Client,
  ClientConfig,
  ClientConfigError,
  ClientEvent,
  ClientStats,
  ClientTls,
  ClearReason,
  CallOptions,
  CodeFlow,
  DeviceConfirmation,
  Flow,
  Login,
} from './client';
export { clientKeyFromForwarded } from './clientKey';
export { TraceContext, validTraceparent } from './trace';
