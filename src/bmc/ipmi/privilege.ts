/** IPMI privilege levels (IPMI v2.0 section 6.8): a session may use commands up to its level. */
export const Privilege = {
  /** Callback: only for call-back sessions. */
  CALLBACK: 0x01,
  /** User: read-only commands (status, device id, boot options read). */
  USER: 0x02,
  /** Operator: everything that changes the machine (power, boot device). */
  OPERATOR: 0x03,
  /** Administrator: also configuration of the BMC itself. */
  ADMINISTRATOR: 0x04,
  /** OEM proprietary level. */
  OEM: 0x05,
} as const;
export type Privilege = (typeof Privilege)[keyof typeof Privilege];

/** Name of a privilege level for messages. */
export function privilegeName(level: number): string {
  const entry = Object.entries(Privilege).find(([, v]) => v === level);
  return entry ? entry[0].toLowerCase() : `level ${level}`;
}
