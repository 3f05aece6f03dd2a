metadata name = 'Input checks'
metadata description = 'Fails the deployment before anything is created when an input breaks a rule that a parameter decorator cannot express. main.bicep evaluates every rule to \'ok\' or to the rule\'s message; @allowed([\'ok\']) makes Resource Manager refuse any other value, and its error quotes the messages. Every other module depends on this one.'

// An array parameter with allowed values takes any subset of them: all 'ok', or the deployment
// stops with "The provided value for the template parameter 'results' is not valid", followed by
// the values, among them the messages of the rules the inputs break.
@description('Required. The result of every input rule: \'ok\' or the rule\'s message.')
@allowed([
  'ok'
])
param results array

@description('How many rules were checked (all passed when the deployment gets this far).')
output checked int = length(results)
