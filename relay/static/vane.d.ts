// Type declarations for Vane's browser tracker (GET /sdk/v1/vane.js on a relay).
// Guide: docs/browser.md. Save as vane.d.ts in your project (also served at /sdk/v1/vane.d.ts).

export type FlagValue = boolean | string | number | null | FlagValue[] | { [key: string]: FlagValue };

/** Properties of an event: `value`, `currency` and `eventId` become the event's own fields. */
export interface TrackProps {
  /** An integer amount in minor units (cents): 1999 for 19.99. */
  value?: number;
  /** ISO 4217 code, e.g. "EUR". */
  currency?: string;
  /** Your own id (an order number): an event sent twice with one id is counted once. */
  eventId?: string;
  /** The event is of the unit of this kind given to `identify` (an "organization"), not the user. */
  unitKind?: string;
  [prop: string]: unknown;
}

/** The flags whose value changed, with their new values (a removed flag maps to undefined). */
export type FlagChanges = Record<string, FlagValue | undefined>;

export interface Vane {
  readonly version: string;
  /** The current unit: `data-unit`, the last `identify()`, or the visitor id. */
  readonly unit: string;
  /** Settles once flags are loaded and the page's experiments applied, or failed. Never rejects. */
  ready(): Promise<void>;
  /** Switch to another unit (a user who signed in): flags and experiments are re-evaluated.
   * `kinds` gives units of other context kinds, by key or with attributes rules read:
   * `identify("u1", { organization: { key: "acme", plan: "enterprise" } })`. Flags are then
   * evaluated for the multi-kind context, and experiments on those kinds assign by their key.
   * `user` gives the unit's own attributes (no key: the unit is its key), which flags' rules and
   * experiments' dimensions read: `identify("u1", { user: { country: "DE", plan: "pro" } })`. */
  identify(unit: string, kinds?: Record<string, string | { key?: string; [attribute: string]: unknown }>): Promise<void>;
  /** Queue an event; names starting with "$" are reserved. Never throws. */
  track(event: string, props?: TrackProps): void;
  /** The variant of a running experiment for the current unit (records the exposure);
   * "control" when it is not running, on failure, or while consent is pending. */
  experiment(key: string): Promise<string>;
  /** A flag's current value, or `fallback` when it is unknown or failed to evaluate. */
  flag<T extends FlagValue>(key: string, fallback: T): T;
  /** Every client-side flag's current value. */
  flags(): Record<string, FlagValue>;
  /** Called when a change reaches the page (the relay's event stream); returns an unsubscribe. */
  on(event: "change", callback: (changes: FlagChanges) => void): () => void;
  /** Give (true) or withdraw (false) consent; with `data-consent="pending"` nothing is stored or
   * sent before `consent(true)`. Withdrawing deletes what the tracker stored. */
  consent(granted: boolean): void;
}

declare global {
  interface Window {
    vane: Vane;
  }
  const vane: Vane;
}
