// ACTORFLOW_API marks what libactorflow exports: the library is compiled with
// hidden visibility, so only the classes and functions of the public headers
// carrying this mark are visible to an application.
#pragma once

#define ACTORFLOW_API __attribute__((visibility("default")))
