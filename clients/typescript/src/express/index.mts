// @portcullis/client/express as an ES module: the CommonJS build's own objects,
// re-exported (one copy of each, whichever way the app loads it).

export { PortcullisExpressError, loginOutcome, outcomeOf, portcullisExpress, resetOutcome } from './index.js';
export type {
  DeviceCookieOptions,
  LoginAllow,
  LoginChallenge,
  LoginChangeRequired,
  LoginDeny,
  LoginOutcome,
  LoginSecondFactor,
  PortcullisExpress,
  PortcullisExpressEvent,
  PortcullisExpressOptions,
  ResetNoMail,
  ResetOutcome,
  ResetSend,
} from './index.js';
