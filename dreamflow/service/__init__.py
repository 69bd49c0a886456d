"""`dreamflow start`: the process supervisor (`supervisor`), its supervised children (`children`), the workspaces
it serves (`hosting`) and their status rows (`workspace_status`)."""
