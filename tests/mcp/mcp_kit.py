"""What the MCP tests share."""

#: A word only on a RESTRICTED page of liba's report: it must never come out of any tool.
CANARY = "zqmcpcanary"

#: Reads libb whole and liba only where entity is "nobody": no document of liba.
KEY_FILTERED = "key-ffffffff"
