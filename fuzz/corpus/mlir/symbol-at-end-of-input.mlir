
// expacity must be a i‡ve res_attrsnumber of rows or '?', got -0}}
func.func @ne