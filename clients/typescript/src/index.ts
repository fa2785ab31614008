// @portcullis/client: the gateway library of Portcullis for Node. See README.md.
// The CommonJS entry point; index.mts is the ES module one (the same objects).

export { Answer, AnswerKind, ChallengeReason, Decision, Failure, PasswordCheck, Signals } from './answer';
export { ClientStats } from './caller';
export { Client, CountingOptions } from './client';
export { ClientConfig, ClientConfigError, ClientEvent, ClientTls, DEFAULTS, GovernorMethod } from './config';
export { CallOptions, ClearReason, CodeFlow, DeviceConfirmation, Flow, Login } from './requests';
export { clientKeyFromForwarded } from './clientKey';
export { TraceContext, validTraceparent } from './trace';
